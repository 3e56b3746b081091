//===- CudaBackend.cpp - The CUDA backend: the forward pass on one GPU ----===//

#include "runtime/backend/CudaBackend.h"

#include "runtime/backend/CudaRelocationLayout.h"
#include "runtime/backend/CudaStepLayout.h"
#include "runtime/backend/cpu/RelocationExecutor.h"
#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cuda/AddRows.h"
#include "runtime/kernels/cuda/CopyBlock.h"
#include "runtime/kernels/cuda/Dequantize.h"
#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Embedding.h"
#include "runtime/kernels/cuda/Gemm.h"
#include "runtime/kernels/cuda/KvDistances.h"
#include "runtime/kernels/cuda/KvWrite.h"
#include "runtime/kernels/cuda/PagedAttention.h"
#include "runtime/kernels/cuda/Relocation.h"
#include "runtime/kernels/cuda/RmsNorm.h"
#include "runtime/kernels/cuda/Rope.h"
#include "runtime/kernels/cuda/Rows.h"
#include "runtime/kernels/cuda/Sampling.h"
#include "runtime/kernels/cuda/StatusError.h"
#include "runtime/kernels/cuda/SwiGlu.h"
#include "runtime/model/Quantization.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace spanc::backend {

namespace {

llvm::Error backendError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 ("cuda backend: " + message).str());
}

/// Returns from the enclosing llvm::Error function when a kernel call failed.
#define SPANC_CUDA_CHECK(expression)                                           \
  do {                                                                         \
    if (llvm::Error spancError = cuda::toError(expression))                    \
      return spancError;                                                       \
  } while (false)

/// A model's weights on one device. The executors of one process (a
/// benchmark's configurations side by side) share them: an 8B model's
/// 14 GB are uploaded once, not once per executor.
struct DeviceWeights {
  CudaWeightLayout layout;
  cuda::DeviceBuffer arena;
};

llvm::Error uploadWeights(const CudaWeightLayout &weights,
                          cuda::DeviceBuffer &arena, cuda::Stream stream);

/// The weights of `model` on device `ordinal`, uploaded by the first
/// backend that asks while none holds them.
llvm::Expected<std::shared_ptr<DeviceWeights>>
sharedWeights(const model::Model &model, int ordinal, cuda::Stream stream) {
  static std::mutex mutex;
  static std::map<std::pair<const model::Model *, int>,
                  std::weak_ptr<DeviceWeights>>
      uploaded;
  std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<DeviceWeights> &slot = uploaded[{&model, ordinal}];
  if (std::shared_ptr<DeviceWeights> existing = slot.lock())
    return existing;
  auto layout =
      planCudaWeights(model.file(), model.config(), [](model::GgmlType type) {
        return cuda::canDequantizeOnDevice(uint32_t(type));
      });
  if (!layout)
    return layout.takeError();
  auto weights = std::make_shared<DeviceWeights>();
  weights->layout = std::move(*layout);
  if (llvm::Error error =
          uploadWeights(weights->layout, weights->arena, stream))
    return error;
  slot = weights;
  return weights;
}

} // namespace

/// Everything the backend owns on the device, kept out of the header so its
/// users need no kernel header.
struct CudaBackend::State {
  model::Model *model = nullptr;
  CudaDeviceInfo deviceInfo;
  /// The weight arena (CudaWeightLayout offsets), shared.
  std::shared_ptr<DeviceWeights> weights;
  cuda::Stream stream = nullptr;
  std::unique_ptr<cuda::GemmEngine> gemm;
  /// The K/V pool.
  cuda::DeviceBuffer pool;
  cuda::KvPoolView poolView;
  /// K unrotated (rope-in-kernel): the attention kernel rotates keys.
  bool ropeInKernel = true;
  /// Tensor cores where they fit (the default), or the f32 SIMT kernel
  /// everywhere: SPANC_CUDA_ATTENTION=simt, for comparing the two.
  cuda::AttentionKernel attentionKernel = cuda::AttentionKernel::Auto;
  /// The model's RoPE table rows on the device.
  cuda::DeviceBuffer ropeRows;
  cuda::RopeTableView ropeTable;
  /// ReRoPE's per-pair frequencies (host; the relocation batch reads them).
  std::vector<double> frequencies;

  // One step.
  CudaStepArrays hostStep;
  cuda::DeviceBuffer stepArrays;
  cuda::AttentionWorkspace attention;
  int64_t capacity = 0; ///< tokens the activations below hold
  cuda::DeviceBuffer hidden, normed, queryKeyValue, attentionOut, gateUp,
      feedForward;
  int64_t logitCapacity = 0;
  cuda::DeviceBuffer selected, selectedNormed, logits;

  // Relocations.
  CudaRelocationLayout relocation;
  cuda::RelocationWorkspace relocationWorkspace;
  std::vector<cuda::RelocationOp> relocationOps;
  /// A failure of relocate() or copyBlock(), returned by the next forward.
  std::string pendingError;
  /// The op timers (Backend::setProfiling): a mark after each op, the
  /// profile field each interval adds to, what they summed.
  bool timing = false;
  cuda::StreamTimeline timeline;
  std::vector<double ForwardProfile::*> timedOps;
  std::vector<float> intervals;
  ForwardProfile timedProfile;

  // tokenDistances: the block pairs and the distances of their slots.
  std::vector<int32_t> hostPairs;
  std::vector<float> hostDistances;
  cuda::DeviceBuffer distancePairs, distanceRows;

  ~State() {
    if (stream)
      (void)cuda::destroyStream(stream);
  }

  llvm::Error reserve(int64_t numTokens, int64_t numLogitRows);

  /// Makes the backend's GPU current for the calling thread (the current
  /// device is per thread: serve's engine thread did not make the
  /// backend); false after keeping the failure for the next forward.
  bool useDevice() {
    cuda::Status status = cuda::setDevice(deviceInfo.ordinal);
    if (!status.ok() && pendingError.empty())
      pendingError = status.message();
    return status.ok();
  }
};

llvm::Error CudaBackend::State::reserve(int64_t numTokens,
                                        int64_t numLogitRows) {
  const model::ModelConfig &config = model->config();
  const int64_t dim = config.embeddingDim;
  const int64_t queryDim = int64_t(config.numHeads) * config.headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * config.headDim;
  const int64_t ffnDim = config.feedForwardDim;
  if (numTokens > capacity) {
    capacity = numTokens;
    SPANC_CUDA_CHECK(hidden.reserve(size_t(numTokens * dim * 4)));
    SPANC_CUDA_CHECK(normed.reserve(size_t(numTokens * dim * 2)));
    SPANC_CUDA_CHECK(
        queryKeyValue.reserve(size_t(numTokens * (queryDim + 2 * kvDim) * 4)));
    SPANC_CUDA_CHECK(attentionOut.reserve(size_t(numTokens * queryDim * 2)));
    SPANC_CUDA_CHECK(gateUp.reserve(size_t(numTokens * 2 * ffnDim * 4)));
    SPANC_CUDA_CHECK(feedForward.reserve(size_t(numTokens * ffnDim * 2)));
  }
  if (numLogitRows > logitCapacity) {
    logitCapacity = numLogitRows;
    SPANC_CUDA_CHECK(selected.reserve(size_t(numLogitRows * dim * 4)));
    SPANC_CUDA_CHECK(selectedNormed.reserve(size_t(numLogitRows * dim * 2)));
    SPANC_CUDA_CHECK(
        logits.reserve(size_t(numLogitRows * int64_t(config.vocabSize) * 4)));
  }
  return llvm::Error::success();
}

namespace {

llvm::Error uploadWeights(const CudaWeightLayout &weights,
                          cuda::DeviceBuffer &arena, cuda::Stream stream) {
  SPANC_CUDA_CHECK(arena.reserve(size_t(weights.arenaBytes)));
  cuda::DeviceBuffer staging;
  SPANC_CUDA_CHECK(staging.reserve(size_t(weights.stagingBytes)));
  std::vector<uint8_t> host(size_t(weights.hostConversionBytes));
  char *base = arena.as<char>();
  for (const TensorConversion &conversion : weights.conversions) {
    const model::GgufTensor &tensor = *conversion.tensor;
    if (!conversion.isMatrix) {
      // Norms and biases: f32 on the host, then uploaded.
      float *values = reinterpret_cast<float *>(host.data());
      model::dequantizeRow(tensor.type, tensor.data, values,
                           int64_t(conversion.vector.size));
      SPANC_CUDA_CHECK(cuda::copyToDevice(base + conversion.vector.offset,
                                          values, conversion.vector.size * 4,
                                          stream));
      // The host buffer is reused by the next tensor.
      SPANC_CUDA_CHECK(cuda::synchronize(stream));
      continue;
    }
    const uint64_t columns = conversion.matrix.columns;
    const uint64_t rows = tensor.numRows();
    char *destination = base + conversion.matrix.offset +
                        conversion.firstRow * columns * sizeof(uint16_t);
    if (conversion.onDevice) {
      // Raw blocks up, bf16 out; the stream orders the staging buffer's
      // reuse by the next tensor after this dequantization.
      SPANC_CUDA_CHECK(cuda::copyToDevice(staging.data(), tensor.data,
                                          size_t(tensor.numBytes), stream));
      SPANC_CUDA_CHECK(cuda::dequantizeToBf16(
          cuda::QuantType(uint32_t(tensor.type)), staging.data(),
          int64_t(rows * columns), reinterpret_cast<uint16_t *>(destination),
          stream));
      continue;
    }
    uint16_t *converted = reinterpret_cast<uint16_t *>(host.data());
    const uint64_t rowBytes = tensor.rowBytes();
    for (uint64_t row = 0; row < rows; ++row)
      model::convertRowToBf16(tensor.type, tensor.data + row * rowBytes,
                              converted + row * columns, int64_t(columns));
    SPANC_CUDA_CHECK(cuda::copyToDevice(
        destination, converted, rows * columns * sizeof(uint16_t), stream));
    SPANC_CUDA_CHECK(cuda::synchronize(stream));
  }
  SPANC_CUDA_CHECK(cuda::synchronize(stream));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::unique_ptr<CudaBackend>>
CudaBackend::create(model::Model &model, int64_t numBlocks, unsigned blockSize,
                    bool keysRotated, int deviceOrdinal) {
  auto device = probeCudaDevice(deviceOrdinal);
  if (!device)
    return device.takeError();
  if (model.numerics() == model::Numerics::LlamaCpp)
    return backendError("llama.cpp numerics (--numerics=llama) are "
                        "implemented by the CPU kernels only; use "
                        "--device=cpu");
  const model::ModelConfig &config = model.config();
  if (config.headDim > uint32_t(kernels::kMaxHeadDim) ||
      blockSize > unsigned(kernels::kMaxBlockSize))
    return backendError("head dim " + llvm::Twine(config.headDim) +
                        " or block size " + llvm::Twine(blockSize) +
                        " past the attention kernel's limits (" +
                        llvm::Twine(kernels::kMaxHeadDim) + ", " +
                        llvm::Twine(kernels::kMaxBlockSize) + ")");
  auto state = std::make_unique<State>();
  state->model = &model;
  state->deviceInfo = std::move(*device);
  state->ropeInKernel = !keysRotated;
  if (const char *kernel = std::getenv("SPANC_CUDA_ATTENTION");
      kernel && std::strcmp(kernel, "simt") == 0)
    state->attentionKernel = cuda::AttentionKernel::Simt;
  SPANC_CUDA_CHECK(cuda::setDevice(deviceOrdinal));
  SPANC_CUDA_CHECK(cuda::createStream(state->stream));
  // One cuBLASLt algorithm per shape whatever its rows, so a row's logits
  // do not depend on what shares its step (docs/ARCHITECTURE.md,
  // "Numerics"): a span hit's tail gives the bits it had in the miss.
  cuda::GemmOptions gemmOptions;
  gemmOptions.rowInvariant = true;
  SPANC_CUDA_CHECK(cuda::GemmEngine::create(state->gemm, gemmOptions));

  auto weights = sharedWeights(model, deviceOrdinal, state->stream);
  if (!weights)
    return weights.takeError();
  state->weights = std::move(*weights);

  // The K/V pool: the CPU's KvStorage layout, K and V of a layer one after
  // the other, at the precision the model asks for.
  cuda::KvPoolView &pool = state->poolView;
  pool.numLayers = int(config.numLayers);
  pool.numKvHeads = int(config.numKvHeads);
  pool.headDim = int(config.headDim);
  pool.blockSize = int(blockSize);
  pool.numBlocks = numBlocks;
  pool.precision =
      model.halfPrecisionKv() ? cuda::KvPrecision::F16 : cuda::KvPrecision::F32;
  pool.headStride = int64_t(pool.headDim) * pool.blockSize;
  pool.blockStride = pool.headStride * pool.numKvHeads;
  const int64_t layerElements = pool.blockStride * pool.numBlocks;
  pool.layerStride = 2 * layerElements;
  const int elementBytes = cuda::kvElementBytes(pool.precision);
  const size_t poolBytes =
      size_t(pool.layerStride) * size_t(pool.numLayers) * size_t(elementBytes);
  SPANC_CUDA_CHECK(state->pool.reserve(poolBytes));
  SPANC_CUDA_CHECK(
      cuda::fillZero(state->pool.data(), poolBytes, state->stream));
  pool.keys = state->pool.data();
  pool.values = state->pool.as<char>() + layerElements * elementBytes;

  // The RoPE table's rows, as the CPU rotates with them.
  const cpu::RopeTable &rope = model.rope();
  const size_t ropeFloats =
      size_t(rope.numPositions()) * size_t(rope.config().rotaryDim);
  SPANC_CUDA_CHECK(state->ropeRows.reserve(ropeFloats * sizeof(float)));
  SPANC_CUDA_CHECK(cuda::copyToDevice(state->ropeRows.data(), rope.row(0),
                                      ropeFloats * sizeof(float),
                                      state->stream));
  state->ropeTable.cosSin = state->ropeRows.as<float>();
  state->ropeTable.numPositions = rope.numPositions();
  state->ropeTable.rotaryDim = rope.config().rotaryDim;
  state->ropeTable.headDim = rope.config().headDim;
  state->ropeTable.order = rope.config().order == cpu::RopeOrder::NeoX
                               ? cuda::RopeOrder::NeoX
                               : cuda::RopeOrder::Normal;
  state->frequencies = backend::relocationFrequencies(rope.config());
  SPANC_CUDA_CHECK(cuda::synchronize(state->stream));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(state)));
}

CudaBackend::CudaBackend(std::unique_ptr<State> state)
    : state(std::move(state)) {}

CudaBackend::~CudaBackend() = default;

const CudaDeviceInfo &CudaBackend::device() const { return state->deviceInfo; }

const CudaWeightLayout &CudaBackend::weightLayout() const {
  return state->weights->layout;
}

llvm::Error CudaBackend::synchronize() {
  SPANC_CUDA_CHECK(cuda::synchronize(state->stream));
  if (!state->pendingError.empty()) {
    std::string message = std::move(state->pendingError);
    state->pendingError.clear();
    return backendError(message);
  }
  return llvm::Error::success();
}

StepLimits CudaBackend::stepLimits() const {
  const State &s = *state;
  StepLimits limits;
  limits.numBlocks = s.poolView.numBlocks;
  limits.blockSize = s.poolView.blockSize;
  limits.vocabSize = s.model->config().vocabSize;
  limits.numPositions = s.ropeTable.numPositions;
  limits.ropeInKernel = s.ropeInKernel;
  return withCudaRefusals(limits);
}

uint32_t CudaBackend::numLayers() const {
  return state->model->config().numLayers;
}

llvm::Error CudaBackend::runStep(const StepLayout &step,
                                 model::ForwardOutput *output,
                                 uint32_t numLayers) {
  State &s = *state;
  if (!s.pendingError.empty()) {
    std::string message = std::move(s.pendingError);
    s.pendingError.clear();
    return backendError("an earlier relocation or block copy failed: " +
                        message);
  }
  // The current device is per thread (serve's engine thread is not the one
  // that made the backend).
  SPANC_CUDA_CHECK(cuda::setDevice(s.deviceInfo.ordinal));
  const model::ModelConfig &config = s.model->config();
  packCudaStep(step, s.hostStep);
  if (output) {
    output->rowOffsets.assign(step.rowOffsets.begin(), step.rowOffsets.end());
    output->vocabSize = config.vocabSize;
    output->logits.resize(size_t(step.numLogitRows()) * config.vocabSize);
  }
  const int64_t numTokens = step.numTokens();
  const int64_t numRows =
      output && numLayers == config.numLayers ? step.numLogitRows() : 0;
  if (llvm::Error error = s.reserve(numTokens, numRows))
    return error;

  // The step's arrays in one copy; the attention plan in another.
  const std::vector<int32_t> &packed = s.hostStep.packed;
  SPANC_CUDA_CHECK(s.stepArrays.reserve(packed.size() * sizeof(int32_t)));
  SPANC_CUDA_CHECK(cuda::copyToDevice(s.stepArrays.data(), packed.data(),
                                      packed.size() * sizeof(int32_t),
                                      s.stream));
  const int32_t *arrays = s.stepArrays.as<int32_t>();
  const int32_t *tokenIds = arrays + s.hostStep.offsets.tokenIds;
  const int32_t *positions = arrays + s.hostStep.offsets.positions;
  const int32_t *slotBlocks = arrays + s.hostStep.offsets.slotBlocks;
  const int32_t *slotIndices = arrays + s.hostStep.offsets.slotIndices;
  const int32_t *logitTokens = arrays + s.hostStep.offsets.logitTokens;

  const int64_t dim = config.embeddingDim;
  const int64_t headDim = config.headDim;
  const int64_t queryDim = int64_t(config.numHeads) * headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * headDim;
  const int64_t qkvDim = queryDim + 2 * kvDim;
  const int64_t ffnDim = config.feedForwardDim;

  cuda::PagedAttentionShape attentionShape;
  attentionShape.numQueryHeads = int(config.numHeads);
  attentionShape.numKvHeads = int(config.numKvHeads);
  attentionShape.headDim = int(headDim);
  attentionShape.scale = 1.0f / std::sqrt(float(headDim));
  attentionShape.queryRowStride = qkvDim;
  attentionShape.outputRowStride = queryDim;
  cuda::PagedAttentionBatch attentionBatch;
  attentionBatch.numSequences = step.numSequences();
  attentionBatch.queryOffsets = step.queryOffsets.data();
  attentionBatch.pageOffsets = step.pageOffsets.data();
  attentionBatch.blockIds = step.blockIds.data();
  attentionBatch.validTokens = step.validTokens.data();
  SPANC_CUDA_CHECK(s.attention.prepare(attentionShape, attentionBatch,
                                       s.poolView.blockSize,
                                       cuda::AttentionPlanOptions(), s.stream));
  cuda::PagedAttentionOptions attentionOptions;
  attentionOptions.keyRope = s.ropeInKernel ? &s.ropeTable : nullptr;
  attentionOptions.kernel = s.attentionKernel;

  const CudaWeightLayout &weights = s.weights->layout;
  const char *arena = s.weights->arena.as<char>();
  auto matrix = [&](const DeviceMatrix &m) {
    return reinterpret_cast<const uint16_t *>(arena + m.offset);
  };
  auto vector = [&](const DeviceVector &v) {
    return reinterpret_cast<const float *>(arena + v.offset);
  };
  // Y = X . W^T over every token: bf16 X rows `depth` apart, f32 Y.
  auto project = [&](const DeviceMatrix &weight, const uint16_t *x, void *y,
                     int64_t yStride, bool accumulate) {
    cuda::GemmProblem problem;
    problem.rows = numTokens;
    problem.columns = int64_t(weight.rows);
    problem.depth = int64_t(weight.columns);
    problem.x = x;
    problem.xStride = int64_t(weight.columns);
    problem.w = matrix(weight);
    problem.wStride = int64_t(weight.columns);
    problem.y = y;
    problem.yStride = yStride;
    problem.outputType = cuda::GemmOutputType::F32;
    problem.accumulate = accumulate;
    return s.gemm->multiply(problem, s.stream);
  };

  float *hidden = s.hidden.as<float>();
  uint16_t *normed = s.normed.as<uint16_t>();
  float *qkv = s.queryKeyValue.as<float>();
  uint16_t *attention = s.attentionOut.as<uint16_t>();
  float *gateUp = s.gateUp.as<float>();
  uint16_t *feedForward = s.feedForward.as<uint16_t>();
  const cuda::RowShape dimRows{numTokens, dim, dim, dim};

  cuda::EmbeddingTable embedding;
  embedding.bf16Rows = matrix(weights.embedding);
  embedding.numRows = int64_t(weights.embedding.rows);
  embedding.dim = dim;
  embedding.rowStride = dim;
  // With the op timers on: a mark after each op, charged to `field`.
  auto timed = [&](double ForwardProfile::*field) -> cuda::Status {
    if (!s.timing)
      return cuda::Status::success();
    s.timedOps.push_back(field);
    return s.timeline.mark(s.stream);
  };
  if (s.timing) {
    // A step that failed midway left marks: this step's start afresh.
    s.timeline.discard();
    s.timedOps.clear();
    SPANC_CUDA_CHECK(s.timeline.mark(s.stream));
  }
  SPANC_CUDA_CHECK(cuda::embeddingLookup(embedding, tokenIds, numTokens, hidden,
                                         dim, s.stream));
  SPANC_CUDA_CHECK(timed(&ForwardProfile::embeddingSeconds));
  for (uint32_t layerIndex = 0; layerIndex < numLayers; ++layerIndex) {
    const CudaLayerWeights &layer = weights.layers[layerIndex];
    SPANC_CUDA_CHECK(cuda::rmsNorm(dimRows, hidden, vector(layer.attentionNorm),
                                   config.rmsEpsilon, normed, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::normSeconds));
    SPANC_CUDA_CHECK(project(layer.queryKeyValue, normed, qkv, qkvDim, false));
    if (!layer.queryKeyValueBias.empty())
      SPANC_CUDA_CHECK(
          cuda::addBias(cuda::RowShape{numTokens, qkvDim, qkvDim, qkvDim}, qkv,
                        vector(layer.queryKeyValueBias), s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::qkvSeconds));
    SPANC_CUDA_CHECK(cuda::applyRope(
        cuda::RopeShape{numTokens, int64_t(config.numHeads), qkvDim},
        s.ropeTable, positions, qkv, s.stream));
    if (!s.ropeInKernel)
      SPANC_CUDA_CHECK(cuda::applyRope(
          cuda::RopeShape{numTokens, int64_t(config.numKvHeads), qkvDim},
          s.ropeTable, positions, qkv + queryDim, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::ropeSeconds));
    SPANC_CUDA_CHECK(cuda::writeKv(s.poolView, int(layerIndex), numTokens,
                                   slotBlocks, slotIndices, qkv + queryDim,
                                   qkv + queryDim + kvDim, qkvDim, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::kvWriteSeconds));
    SPANC_CUDA_CHECK(
        cuda::pagedAttention(attentionShape, s.attention,
                             cuda::layerView(s.poolView, int(layerIndex)), qkv,
                             attention, attentionOptions, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::attentionSeconds));
    // The output projection adds into the residual stream (beta 1).
    SPANC_CUDA_CHECK(
        project(layer.attentionOutput, attention, hidden, dim, true));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::attentionOutputSeconds));
    SPANC_CUDA_CHECK(cuda::rmsNorm(dimRows, hidden,
                                   vector(layer.feedForwardNorm),
                                   config.rmsEpsilon, normed, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::normSeconds));
    SPANC_CUDA_CHECK(project(layer.gateUp, normed, gateUp, 2 * ffnDim, false));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::gateUpSeconds));
    SPANC_CUDA_CHECK(
        cuda::swiGlu(cuda::RowShape{numTokens, ffnDim, 2 * ffnDim, ffnDim},
                     gateUp, gateUp + ffnDim, feedForward, s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::swiGluSeconds));
    SPANC_CUDA_CHECK(project(layer.down, feedForward, hidden, dim, true));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::downSeconds));
  }

  if (numRows > 0) {
    float *selected = s.selected.as<float>();
    uint16_t *selectedNormed = s.selectedNormed.as<uint16_t>();
    float *logits = s.logits.as<float>();
    SPANC_CUDA_CHECK(cuda::gatherRows(cuda::RowShape{numRows, dim, dim, dim},
                                      hidden, logitTokens, selected, s.stream));
    SPANC_CUDA_CHECK(cuda::rmsNorm(cuda::RowShape{numRows, dim, dim, dim},
                                   selected, vector(weights.outputNorm),
                                   config.rmsEpsilon, selectedNormed,
                                   s.stream));
    cuda::GemmProblem head;
    head.rows = numRows;
    head.columns = int64_t(weights.output.rows);
    head.depth = dim;
    head.x = selectedNormed;
    head.xStride = dim;
    head.w = matrix(weights.output);
    head.wStride = dim;
    head.y = logits;
    head.yStride = head.columns;
    head.outputType = cuda::GemmOutputType::F32;
    SPANC_CUDA_CHECK(s.gemm->multiply(head, s.stream));
    SPANC_CUDA_CHECK(
        cuda::copyLogitsToHost(logits, numRows, int64_t(config.vocabSize),
                               head.columns, output->logits.data(), s.stream));
    SPANC_CUDA_CHECK(timed(&ForwardProfile::outputHeadSeconds));
  } else {
    // Report a kernel's asynchronous failure with this step.
    SPANC_CUDA_CHECK(cuda::synchronize(s.stream));
  }
  if (s.timing) {
    SPANC_CUDA_CHECK(s.timeline.collect(s.intervals));
    for (size_t index = 0; index < s.intervals.size(); ++index)
      s.timedProfile.*s.timedOps[index] += double(s.intervals[index]) * 1e-3;
  }
  return llvm::Error::success();
}

void CudaBackend::enableOpTimers(bool enabled) { state->timing = enabled; }

ForwardProfile CudaBackend::opProfile() const { return state->timedProfile; }

void CudaBackend::resetOpProfile() { state->timedProfile = ForwardProfile(); }

void CudaBackend::tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                                 llvm::ArrayRef<int32_t> b,
                                 llvm::ArrayRef<int32_t> validTokens,
                                 std::vector<float> &distances) {
  // Every pair in one launch over whole blocks; the valid slots of each are
  // kept, in block order, as KvStorage::tokenDistances appends them.
  State &s = *state;
  const int64_t numPairs = int64_t(a.size());
  if (numPairs == 0)
    return;
  const int blockSize = s.poolView.blockSize;
  s.hostPairs.assign(a.begin(), a.end());
  s.hostPairs.insert(s.hostPairs.end(), b.begin(), b.end());
  s.hostDistances.resize(size_t(numPairs * blockSize));
  auto run = [&]() -> cuda::Status {
    SPANC_CUDA_TRY(cuda::setDevice(s.deviceInfo.ordinal));
    SPANC_CUDA_TRY(
        s.distancePairs.reserve(s.hostPairs.size() * sizeof(int32_t)));
    SPANC_CUDA_TRY(
        s.distanceRows.reserve(s.hostDistances.size() * sizeof(float)));
    SPANC_CUDA_TRY(
        cuda::copyToDevice(s.distancePairs.data(), s.hostPairs.data(),
                           s.hostPairs.size() * sizeof(int32_t), s.stream));
    const int32_t *pairs = s.distancePairs.as<int32_t>();
    SPANC_CUDA_TRY(cuda::tokenDistances(s.poolView, int(layer), pairs,
                                        pairs + numPairs, numPairs,
                                        s.distanceRows.as<float>(), s.stream));
    return cuda::copyToHost(s.hostDistances.data(), s.distanceRows.data(),
                            s.hostDistances.size() * sizeof(float), s.stream);
  };
  cuda::Status status = run();
  if (!status.ok()) {
    // Reported by the next forward; the selection reads zeros meanwhile.
    if (s.pendingError.empty())
      s.pendingError = status.message();
    std::fill(s.hostDistances.begin(), s.hostDistances.end(), 0.0f);
  }
  for (int64_t pair = 0; pair < numPairs; ++pair) {
    const float *row = s.hostDistances.data() + pair * blockSize;
    distances.insert(distances.end(), row, row + validTokens[size_t(pair)]);
  }
}

void CudaBackend::relocate(const kv::RelocationPlan &plan) {
  State &s = *state;
  if (plan.batches.empty())
    return;
  if (!s.useDevice())
    return;
  if (llvm::Error error = buildCudaRelocationLayout(
          plan.batches, s.poolView.numBlocks, s.relocation)) {
    if (s.pendingError.empty())
      s.pendingError = llvm::toString(std::move(error));
    else
      llvm::consumeError(std::move(error));
    return;
  }
  cuda::RelocationRotation rotation;
  rotation.order = s.ropeTable.order;
  rotation.rotaryDim = s.ropeTable.rotaryDim;
  rotation.frequencies = s.frequencies.data();
  const CudaRelocationLayout &layout = s.relocation;
  for (int batch = 0; batch < layout.numBatches(); ++batch) {
    s.relocationOps.clear();
    for (int32_t op = layout.batchOffsets[size_t(batch)];
         op < layout.batchOffsets[size_t(batch) + 1]; ++op)
      s.relocationOps.push_back(cuda::RelocationOp{
          uint32_t(layout.sources()[op]), uint32_t(layout.destinations()[op]),
          int64_t(layout.deltas()[op])});
    cuda::Status status = cuda::relocateBlocks(
        s.poolView, rotation, s.relocationOps.data(), s.relocationOps.size(),
        s.relocationWorkspace, s.stream);
    if (!status.ok()) {
      if (s.pendingError.empty())
        s.pendingError = status.message();
      return;
    }
  }
}

void CudaBackend::copyBlock(const kv::RelocationOp &copy) {
  State &s = *state;
  if (!s.useDevice())
    return;
  cuda::Status status;
  if (copy.delta == 0 && copy.source != copy.destination) {
    status = cuda::copyBlock(s.poolView, int64_t(copy.source),
                             int64_t(copy.destination), s.stream);
  } else {
    kv::RelocationPlan plan;
    plan.batches.push_back({copy});
    relocate(plan);
    return;
  }
  if (!status.ok() && s.pendingError.empty())
    s.pendingError = status.message();
}

} // namespace spanc::backend
