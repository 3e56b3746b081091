//===- Model.cpp - A Llama-family decoder and its batched CPU forward pass ===//

#include "runtime/model/Model.h"

#include "runtime/model/AttentionMass.h"

#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace spanc::model {

namespace {

/// Adds the elapsed time since construction to a profile counter.
class OpTimer {
public:
  OpTimer(bool enabled, double &counter)
      : counter(enabled ? &counter : nullptr),
        start(enabled ? std::chrono::steady_clock::now()
                      : std::chrono::steady_clock::time_point()) {}
  ~OpTimer() {
    if (counter)
      *counter += std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  }

private:
  double *counter;
  std::chrono::steady_clock::time_point start;
};

cpu::RopeConfig ropeConfigOf(const ModelConfig &config,
                             const std::vector<float> &frequencyFactors) {
  cpu::RopeConfig rope;
  rope.headDim = int(config.headDim);
  rope.rotaryDim = int(config.rotaryDim);
  rope.order = config.ropeOrder == RopeOrder::NeoX ? cpu::RopeOrder::NeoX
                                                   : cpu::RopeOrder::Normal;
  rope.theta = config.ropeTheta;
  switch (config.ropeScaling) {
  case RopeScalingType::None:
    rope.scaling = cpu::RopeScaling::None;
    break;
  case RopeScalingType::Linear:
    rope.scaling = cpu::RopeScaling::Linear;
    break;
  case RopeScalingType::Yarn:
    rope.scaling = cpu::RopeScaling::Yarn;
    break;
  }
  rope.factor = config.ropeScalingFactor;
  rope.originalContext = int(config.ropeOriginalContext);
  rope.freqFactors = frequencyFactors;
  return rope;
}

} // namespace

llvm::StringRef numericsName(Numerics numerics) {
  return numerics == Numerics::LlamaCpp ? "llama" : "default";
}

std::optional<Numerics> parseNumerics(llvm::StringRef name) {
  if (name == "default")
    return Numerics::Default;
  if (name == "llama" || name == "llama.cpp")
    return Numerics::LlamaCpp;
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<Model>>
Model::load(llvm::StringRef path, const ModelOptions &options) {
  std::unique_ptr<Model> model(new Model());
  auto file = GgufFile::open(path);
  if (!file)
    return file.takeError();
  model->gguf = std::move(*file);
  auto config = ModelConfig::fromGguf(*model->gguf);
  if (!config)
    return config.takeError();
  model->modelConfig = std::move(*config);
  const ModelConfig &modelConfig = model->modelConfig;
  if (modelConfig.numHeads % modelConfig.numKvHeads != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: %u attention heads are not a multiple of %u KV heads",
        path.str().c_str(), modelConfig.numHeads, modelConfig.numKvHeads);
  model->gemm = std::make_unique<cpu::GemmEngine>(
      options.forceF32 ? cpu::GemmPrecision::F32 : cpu::defaultGemmPrecision(),
      options.gemmKernel);
  model->modelNumerics = options.numerics;
  model->halfPrecisionKv = options.halfPrecisionKv;
  if (!options.hostWeights) {
    // A device backend reads the file's tensors itself; only the RoPE
    // table (ReRoPE's angles, the reference positions) is needed here,
    // and the small tensors are checked for NaN as the host's load does.
    if (llvm::Error error = checkFiniteVectors(*model->gguf))
      return error;
    auto factors = loadRopeFrequencyFactors(*model->gguf, modelConfig);
    if (!factors)
      return factors.takeError();
    int64_t positions =
        options.maxPositions > 0
            ? options.maxPositions
            : std::max<int64_t>(modelConfig.contextLength, 4096);
    model->ropeTable =
        cpu::RopeTable(ropeConfigOf(modelConfig, *factors), positions);
    return model;
  }
  // llama.cpp numerics apply their own SwiGLU to separate gate|up products.
  auto weights = ModelWeights::load(*model->gguf, modelConfig, *model->gemm,
                                    /*gatedFeedForward=*/options.numerics !=
                                        Numerics::LlamaCpp);
  if (!weights)
    return weights.takeError();
  model->modelWeights = std::move(*weights);
  model->quantizedDecode =
      !options.forceF32 && cpu::hasQuantGemvKernel() && options.quantizedDecode;
  if (options.numerics == Numerics::LlamaCpp) {
    // Every step multiplies the file's blocks (the scalar GEMV computes the
    // same integer sums where VNNI is missing).
    if (!cpu::hasLlamaCppNumerics() || !cpu::hasHalfAccumulatingAttention())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "llama.cpp numerics need AVX-512 (llama.cpp's own kernels there)");
    if (modelConfig.ropeScaling == RopeScalingType::Yarn)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "%s: llama.cpp numerics do not cover YaRN RoPE scaling",
          path.str().c_str());
    cpu::LlamaCppRopeShape &rope = model->llamaRope;
    rope.headDim = int(modelConfig.headDim);
    rope.rotaryDim = int(modelConfig.rotaryDim);
    rope.neox = modelConfig.ropeOrder == RopeOrder::NeoX;
    rope.base = modelConfig.ropeTheta;
    rope.linearScale = modelConfig.ropeScaling == RopeScalingType::Linear
                           ? 1.0f / modelConfig.ropeScalingFactor
                           : 1.0f;
    const std::vector<float> &factors =
        model->modelWeights->ropeFrequencyFactors();
    rope.frequencyFactors = factors.empty() ? nullptr : factors.data();
    model->halfPrecisionKv = true;
    model->quantizedDecode = true;
    for (const LayerWeights &layer : model->modelWeights->layers())
      if (!layer.hasQuantized)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "%s: llama.cpp numerics need Q4_1/Q8_0 projection weights",
            path.str().c_str());
  }
  int64_t positions = options.maxPositions > 0
                          ? options.maxPositions
                          : std::max<int64_t>(modelConfig.contextLength, 4096);
  model->ropeTable = cpu::RopeTable(
      ropeConfigOf(modelConfig, model->modelWeights->ropeFrequencyFactors()),
      positions);
  return model;
}

kv::KvStorageConfig Model::kvStorageConfig(int64_t numBlocks, int blockSize,
                                           bool keysRotated) const {
  kv::KvStorageConfig config;
  config.numLayers = int(modelConfig.numLayers);
  config.numKvHeads = int(modelConfig.numKvHeads);
  config.headDim = int(modelConfig.headDim);
  config.blockSize = blockSize;
  config.numBlocks = numBlocks;
  config.keysRotated = keysRotated;
  config.precision =
      halfPrecisionKv ? cpu::KvPrecision::F16 : cpu::KvPrecision::F32;
  return config;
}

void Model::reserve(int64_t numTokens) {
  if (numTokens <= capacity)
    return;
  capacity = numTokens;
  const int64_t dim = modelConfig.embeddingDim;
  const int64_t queryDim = int64_t(modelConfig.numHeads) * modelConfig.headDim;
  const int64_t kvDim = int64_t(modelConfig.numKvHeads) * modelConfig.headDim;
  hidden.resize(size_t(numTokens * dim));
  normed.resize(size_t(numTokens * dim));
  queryKeyValue.resize(size_t(numTokens * (queryDim + 2 * kvDim)));
  attention.resize(size_t(numTokens * queryDim));
  projected.resize(size_t(numTokens * dim));
  gateUp.resize(size_t(numTokens * 2 * modelConfig.feedForwardDim));
  feedForward.resize(size_t(numTokens * modelConfig.feedForwardDim));
  selected.resize(size_t(numTokens * dim));
}

llvm::Error Model::feedForwardFused(const LayerWeights &layer,
                                    int64_t numTokens) {
  // Decode-size steps: gate|up, SwiGLU, the quantization of its output and
  // the down projection in one parallel region with one barrier. Each
  // thread takes a range of 32-column blocks of the FFN width: the gate and
  // up rows of those columns (groups g and g + ffnDim/16 of the stacked
  // matrix), their SwiGLU and their activation blocks, so that nothing but
  // the down projection (which reads every block) waits for the others.
  // The arithmetic per element is that of the unfused path.
  const int64_t dim = modelConfig.embeddingDim;
  const int64_t ffnDim = modelConfig.feedForwardDim;
  const int64_t ffnGroups = ffnDim / cpu::PackedQuantMatrix::kGroupRows;
  const int64_t units = ffnDim / 32;
  const bool llamaNumerics = modelNumerics == Numerics::LlamaCpp;
  cpu::quantizeActivations(normed.data(), numTokens, dim, dim,
                           layer.gateUpQuantized.format, quantizedActivations);
  cpu::prepareActivations(numTokens, ffnDim, layer.downQuantized.format,
                          feedForwardActivations);
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point middle;
#pragma omp parallel
  {
    const int thread = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t first = units * thread / threads;
    const int64_t end = units * (thread + 1) / threads;
    const int64_t groupsPerUnit = 32 / cpu::PackedQuantMatrix::kGroupRows;
    if (end > first) {
      cpu::quantGemvGroups(layer.gateUpQuantized, quantizedActivations,
                           gateUp.data(), 2 * ffnDim, first * groupsPerUnit,
                           end * groupsPerUnit);
      cpu::quantGemvGroups(layer.gateUpQuantized, quantizedActivations,
                           gateUp.data(), 2 * ffnDim,
                           ffnGroups + first * groupsPerUnit,
                           ffnGroups + end * groupsPerUnit);
      const cpu::RowShape shape{numTokens, (end - first) * 32, 2 * ffnDim,
                                ffnDim};
      const float *gate = gateUp.data() + first * 32;
      const float *up = gate + ffnDim;
      float *out = feedForward.data() + first * 32;
      if (llamaNumerics)
        cpu::swiGluLlamaCpp(shape, gate, up, out);
      else
        cpu::swiGlu(shape, gate, up, out);
      cpu::quantizeActivationBlocks(feedForward.data(), ffnDim, first, end,
                                    feedForwardActivations);
    }
#pragma omp barrier
#pragma omp master
    if (profiling)
      middle = std::chrono::steady_clock::now();
#pragma omp for schedule(static)
    for (int64_t group = 0; group < layer.downQuantized.groups; ++group)
      cpu::quantGemvGroups(layer.downQuantized, feedForwardActivations,
                           projected.data(), dim, group, group + 1);
  }
  if (profiling) {
    const auto finish = std::chrono::steady_clock::now();
    // SwiGLU runs inside the gate|up share of the region.
    opProfile.gateUpSeconds +=
        std::chrono::duration<double>(middle - start).count();
    opProfile.downSeconds +=
        std::chrono::duration<double>(finish - middle).count();
  }
  return llvm::Error::success();
}

llvm::Error Model::forward(llvm::ArrayRef<ForwardSequence> batch,
                           kv::KvStorage &storage, ForwardOutput &output) {
  return runLayers(batch, storage, output, modelConfig.numLayers);
}

llvm::Error Model::forwardLayers(llvm::ArrayRef<ForwardSequence> batch,
                                 kv::KvStorage &storage, uint32_t numLayers) {
  for (size_t index = 0; index < batch.size(); ++index)
    if (batch[index].logits != LogitsRequest::None)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "forwardLayers: sequence %zu asks for logits", index);
  ForwardOutput output;
  return runLayers(batch, storage, output,
                   std::min(numLayers, modelConfig.numLayers));
}

llvm::Error Model::runLayers(llvm::ArrayRef<ForwardSequence> batch,
                             kv::KvStorage &storage, ForwardOutput &output,
                             uint32_t numLayers) {
  if (!modelWeights)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: the model was loaded without host weights "
        "(ModelOptions::hostWeights); its backend runs the forward pass");
  const ModelConfig &config = modelConfig;
  const kv::KvStorageConfig &kvConfig = storage.config();
  if (kvConfig.numLayers != int(config.numLayers) ||
      kvConfig.numKvHeads != int(config.numKvHeads) ||
      kvConfig.headDim != int(config.headDim))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: KV storage shape (%d layers, %d KV heads, head dim %d) does "
        "not match the model (%u, %u, %u)",
        kvConfig.numLayers, kvConfig.numKvHeads, kvConfig.headDim,
        config.numLayers, config.numKvHeads, config.headDim);
  const bool ropeInKernel = !storage.keysRotated();
  const bool llamaNumerics = modelNumerics == Numerics::LlamaCpp;
  if (llamaNumerics && ropeInKernel)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: llama.cpp numerics need K stored rotated (not "
        "rope-in-kernel)");

  // Validate everything and lay out the batch before touching the cache.
  tokenIds.clear();
  ropePositions.clear();
  queryOffsets.assign(1, 0);
  pageOffsets.assign(1, 0);
  blockIds.clear();
  validTokens.clear();
  slotBlocks.clear();
  slotIndices.clear();
  decodeSequences.clear();
  spanPages.clear();
  spanScalings.clear();
  bool anySpanScaling = false;
  output.rowOffsets.assign(1, 0);
  int64_t numDecodeRows = 0;
  bool anyAllLogits = false;
  ForwardLimits limits;
  limits.numBlocks = storage.numBlocks();
  limits.blockSize = storage.blockSize();
  limits.vocabSize = config.vocabSize;
  limits.numPositions = ropeTable.numPositions();
  limits.ropeInKernel = ropeInKernel;
  if (llamaNumerics)
    limits.spanScalingRefusal =
        "span scaling needs spanc's attention kernel, not llama.cpp numerics";
  for (size_t index = 0; index < batch.size(); ++index) {
    const ForwardSequence &sequence = batch[index];
    const int64_t count = int64_t(sequence.tokens.size());
    int64_t length = 0;
    if (llvm::Error error = checkForwardSequence(batch, index, limits, length))
      return error;
    const bool decode = isDecodeSequence(sequence);
    decodeSequences.push_back(decode ? 1 : 0);
    if (decode)
      numDecodeRows += count;
    anyAllLogits |= sequence.logits == LogitsRequest::All;
    const SpanScaling &scaling = sequence.spanScaling;
    const bool scaled = !sequence.spanPages.empty() && !scaling.isIdentity();
    anySpanScaling |= scaled;
    spanScalings.push_back(
        cpu::SpanScaling{scaling.temperature, scaling.massScale});
    for (size_t page = 0; page < sequence.blockIds.size(); ++page)
      spanPages.push_back(scaled ? sequence.spanPages[page] : 0);
    for (int64_t token = 0; token < count; ++token) {
      tokenIds.push_back(sequence.tokens[size_t(token)]);
      ropePositions.push_back(
          ropePosition(sequence, length, token, ropeInKernel));
    }
    // The slots of the last `count` logical tokens, walking pages backwards.
    size_t firstSlot = slotBlocks.size();
    slotBlocks.resize(firstSlot + size_t(count));
    slotIndices.resize(firstSlot + size_t(count));
    int64_t remaining = count;
    for (size_t page = sequence.blockIds.size(); page-- > 0 && remaining > 0;) {
      for (int32_t slot = sequence.validTokens[page];
           slot-- > 0 && remaining > 0;) {
        --remaining;
        slotBlocks[firstSlot + size_t(remaining)] = sequence.blockIds[page];
        slotIndices[firstSlot + size_t(remaining)] = slot;
      }
    }
    queryOffsets.push_back(queryOffsets.back() + int32_t(count));
    pageOffsets.push_back(pageOffsets.back() +
                          int32_t(sequence.blockIds.size()));
    blockIds.insert(blockIds.end(), sequence.blockIds.begin(),
                    sequence.blockIds.end());
    validTokens.insert(validTokens.end(), sequence.validTokens.begin(),
                       sequence.validTokens.end());
    int64_t logitRows = sequence.logits == LogitsRequest::All    ? count
                        : sequence.logits == LogitsRequest::Last ? 1
                                                                 : 0;
    output.rowOffsets.push_back(output.rowOffsets.back() + logitRows);
  }

  const int64_t numTokens = int64_t(tokenIds.size());
  reserve(numTokens);
  const int64_t dim = config.embeddingDim;
  const int64_t headDim = config.headDim;
  const int64_t queryDim = int64_t(config.numHeads) * headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * headDim;
  const int64_t qkvDim = queryDim + 2 * kvDim;
  const int64_t ffnDim = config.feedForwardDim;
  const cpu::RowShape dimRows{numTokens, dim, dim, dim};
  opProfile.tokens += numTokens;

  {
    OpTimer timer(profiling, opProfile.embeddingSeconds);
    cpu::embeddingLookup(modelWeights->tokenEmbedding(), tokenIds.data(),
                         numTokens, hidden.data(), dim);
  }

  cpu::PagedAttentionShape attentionShape;
  attentionShape.numQueryHeads = int(config.numHeads);
  attentionShape.numKvHeads = int(config.numKvHeads);
  attentionShape.headDim = int(headDim);
  attentionShape.scale = 1.0f / std::sqrt(float(headDim));
  attentionShape.queryRowStride = qkvDim;
  attentionShape.outputRowStride = queryDim;
  cpu::PagedAttentionBatch attentionBatch;
  attentionBatch.numSequences = int(batch.size());
  attentionBatch.queryOffsets = queryOffsets.data();
  attentionBatch.pageOffsets = pageOffsets.data();
  attentionBatch.blockIds = blockIds.data();
  attentionBatch.validTokens = validTokens.data();
  attentionBatch.decodeSequences = decodeSequences.data();
  if (anySpanScaling) {
    attentionBatch.spanPages = spanPages.data();
    attentionBatch.spanScaling = spanScalings.data();
  }
  cpu::PagedAttentionOptions attentionOptions;
  attentionOptions.keyRope = ropeInKernel ? &ropeTable : nullptr;
  // f32 GEMMs (--batch-invariant) keep attention's products in f32 too: a
  // one-token tail then gives the bits its row had inside the prompt.
  attentionOptions.allowAmx = gemm->precision() == cpu::GemmPrecision::Bf16;

  auto normalize = [&](const cpu::RowShape &shape, const float *x,
                       const float *weight, float *out) {
    if (llamaNumerics)
      cpu::rmsNormDoubleSum(shape, x, weight, config.rmsEpsilon, out);
    else
      cpu::rmsNorm(shape, x, weight, config.rmsEpsilon, out);
  };

  // Rows [0, quantizedRows) multiply the 4/8-bit weights in place with
  // int8 activations (decode rows), the rest the packed bf16/f32 copy
  // (prompt rows): each row's path is its own (RowKind).
  // llama.cpp numerics multiply every row on the file's blocks.
  const int64_t quantizedRows = llamaNumerics     ? numTokens
                                : quantizedDecode ? numDecodeRows
                                                  : 0;
  auto multiplyQuantized = [&](const cpu::GemmWeights &packed,
                               const cpu::PackedQuantMatrix &packedQuantized,
                               const float *x, int64_t rows, float *y) {
    cpu::quantizeActivations(x, rows, packed.columns(), packed.columns(),
                             packedQuantized.format, quantizedActivations);
    cpu::quantGemv(packedQuantized, quantizedActivations, y, packed.rows());
  };
  // A projection of every row: the quantized rows into `y` (or, to
  // accumulate, through `projected`), the others through the packed GEMM.
  auto project = [&](const cpu::GemmWeights &packed,
                     const cpu::PackedQuantMatrix &packedQuantized,
                     bool hasQuantized, const float *x, float *y,
                     cpu::GemmOutput mode) -> llvm::Error {
    const int64_t firstPacked = hasQuantized ? quantizedRows : 0;
    const int64_t width = packed.rows();
    if (firstPacked > 0) {
      if (mode == cpu::GemmOutput::Accumulate) {
        multiplyQuantized(packed, packedQuantized, x, firstPacked,
                          projected.data());
        cpu::addInPlace(cpu::RowShape{firstPacked, width, width, width}, y,
                        projected.data());
      } else {
        multiplyQuantized(packed, packedQuantized, x, firstPacked, y);
      }
    }
    if (firstPacked == numTokens)
      return llvm::Error::success();
    return gemm->multiply(packed, x + firstPacked * packed.columns(),
                          numTokens - firstPacked, y + firstPacked * width,
                          mode);
  };

  for (uint32_t layerIndex = 0; layerIndex < numLayers; ++layerIndex) {
    const LayerWeights &layer = modelWeights->layers()[layerIndex];
    {
      OpTimer timer(profiling, opProfile.normSeconds);
      normalize(dimRows, hidden.data(), layer.attentionNorm.data(),
                normed.data());
    }
    {
      OpTimer timer(profiling, opProfile.qkvSeconds);
      if (llvm::Error error =
              project(layer.queryKeyValue, layer.queryKeyValueQuantized,
                      layer.hasQuantized, normed.data(), queryKeyValue.data(),
                      cpu::GemmOutput::Store))
        return error;
      if (!layer.queryKeyValueBias.empty()) {
        const float *bias = layer.queryKeyValueBias.data();
#pragma omp parallel for schedule(static)
        for (int64_t token = 0; token < numTokens; ++token)
          for (int64_t col = 0; col < qkvDim; ++col)
            queryKeyValue[size_t(token * qkvDim + col)] += bias[col];
      }
    }
    {
      OpTimer timer(profiling, opProfile.ropeSeconds);
      if (llamaNumerics) {
        cpu::LlamaCppRopeShape shape = llamaRope;
        shape.rows = numTokens;
        shape.rowStride = qkvDim;
        shape.numHeads = config.numHeads + config.numKvHeads;
        cpu::ropeLlamaCpp(shape, ropePositions.data(), queryKeyValue.data());
      } else {
        cpu::applyRope(cpu::RopeShape{numTokens, config.numHeads, qkvDim},
                       ropeTable, ropePositions.data(), queryKeyValue.data());
        if (!ropeInKernel)
          cpu::applyRope(cpu::RopeShape{numTokens, config.numKvHeads, qkvDim},
                         ropeTable, ropePositions.data(),
                         queryKeyValue.data() + queryDim);
      }
    }
    {
      OpTimer timer(profiling, opProfile.kvWriteSeconds);
      // The storage rounds to its precision (f16 by default, see
      // halfPrecisionKv) and transposes K into its block layout.
      storage.writeTokens(int(layerIndex), numTokens, slotBlocks.data(),
                          slotIndices.data(), queryKeyValue.data() + queryDim,
                          queryKeyValue.data() + queryDim + kvDim, qkvDim);
    }
    {
      OpTimer timer(profiling, opProfile.attentionSeconds);
      if (llamaNumerics)
        cpu::halfAccumulatingAttention(attentionShape, attentionBatch,
                                       storage.layerView(int(layerIndex)),
                                       queryKeyValue.data(), attention.data());
      else
        cpu::pagedAttention(attentionShape, attentionBatch,
                            storage.layerView(int(layerIndex)),
                            queryKeyValue.data(), attention.data(),
                            attentionOptions, attentionWorkspace);
    }
    // A repair's probe: the attention each key receives at this layer.
    for (size_t index = 0; index < batch.size(); ++index) {
      const ForwardSequence &sequence = batch[index];
      if (sequence.keyMass.empty() || layerIndex < sequence.massFirstLayer ||
          layerIndex >= sequence.massEndLayer)
        continue;
      OpTimer timer(profiling, opProfile.attentionSeconds);
      KeyMassShape massShape{int(config.numHeads), int(config.numKvHeads),
                             int(headDim), attentionShape.scale, qkvDim};
      accumulateKeyMass(
          massShape, queryKeyValue.data() + queryOffsets[index] * qkvDim,
          queryOffsets[index + 1] - queryOffsets[index], sequence.blockIds,
          sequence.validTokens, storage.layerView(int(layerIndex)),
          ropeInKernel ? &ropeTable : nullptr, sequence.keyMass.data(),
          massScores, massQueries);
    }
    // The packed GEMMs add their products into the residual stream in
    // their epilogue; the 4/8-bit GEMV writes `projected`, added after.
    {
      OpTimer timer(profiling, opProfile.attentionOutputSeconds);
      if (llvm::Error error =
              project(layer.attentionOutput, layer.attentionOutputQuantized,
                      layer.hasQuantized, attention.data(), hidden.data(),
                      cpu::GemmOutput::Accumulate))
        return error;
    }
    {
      OpTimer timer(profiling, opProfile.normSeconds);
      normalize(dimRows, hidden.data(), layer.feedForwardNorm.data(),
                normed.data());
    }
    auto swiGluRows = [&](int64_t rows, const float *gateUpRows, float *out) {
      OpTimer timer(profiling, opProfile.swiGluSeconds);
      const cpu::RowShape shape{rows, ffnDim, 2 * ffnDim, ffnDim};
      if (llamaNumerics)
        cpu::swiGluLlamaCpp(shape, gateUpRows, gateUpRows + ffnDim, out);
      else
        cpu::swiGlu(shape, gateUpRows, gateUpRows + ffnDim, out);
    };
    // Quantized rows: gate|up, SwiGLU and down on the 4/8-bit weights
    // (fused in one parallel region where the width allows), into
    // `projected`, then added to the residual stream.
    const int64_t firstPacked = layer.hasQuantized ? quantizedRows : 0;
    if (firstPacked > 0) {
      if (ffnDim % 32 == 0) {
        if (llvm::Error error = feedForwardFused(layer, firstPacked))
          return error;
      } else {
        {
          OpTimer timer(profiling, opProfile.gateUpSeconds);
          multiplyQuantized(layer.gateUp, layer.gateUpQuantized, normed.data(),
                            firstPacked, gateUp.data());
        }
        swiGluRows(firstPacked, gateUp.data(), feedForward.data());
        OpTimer timer(profiling, opProfile.downSeconds);
        multiplyQuantized(layer.down, layer.downQuantized, feedForward.data(),
                          firstPacked, projected.data());
      }
      OpTimer timer(profiling, opProfile.residualSeconds);
      cpu::addInPlace(cpu::RowShape{firstPacked, dim, dim, dim}, hidden.data(),
                      projected.data());
    }
    if (firstPacked == numTokens)
      continue;
    // Packed rows: the GEMMs add the down projection into the residual
    // stream in their epilogue.
    const int64_t rows = numTokens - firstPacked;
    const float *normedRows = normed.data() + firstPacked * dim;
    if (layer.gateUp.isGated()) {
      // The SwiGLU runs in the GEMM's epilogue (its time counts there).
      OpTimer timer(profiling, opProfile.gateUpSeconds);
      if (llvm::Error error = gemm->multiplyGated(layer.gateUp, normedRows,
                                                  rows, feedForward.data()))
        return error;
    } else {
      {
        OpTimer timer(profiling, opProfile.gateUpSeconds);
        if (llvm::Error error =
                gemm->multiply(layer.gateUp, normedRows, rows, gateUp.data()))
          return error;
      }
      swiGluRows(rows, gateUp.data(), feedForward.data());
    }
    OpTimer timer(profiling, opProfile.downSeconds);
    if (llvm::Error error = gemm->multiply(layer.down, feedForward.data(), rows,
                                           hidden.data() + firstPacked * dim,
                                           cpu::GemmOutput::Accumulate))
      return error;
  }

  // Gather the rows whose logits were asked for, then norm and project them.
  OpTimer timer(profiling, opProfile.outputHeadSeconds);
  const int64_t numRows = output.rowOffsets.back();
  output.vocabSize = config.vocabSize;
  output.logits.resize(size_t(numRows * config.vocabSize));
  if (numRows == 0 || numLayers < config.numLayers)
    return llvm::Error::success();
  int64_t row = 0;
  for (size_t index = 0; index < batch.size(); ++index) {
    int64_t first = queryOffsets[index], end = queryOffsets[index + 1];
    if (batch[index].logits == LogitsRequest::None)
      continue;
    if (batch[index].logits == LogitsRequest::Last)
      first = end - 1;
    for (int64_t token = first; token < end; ++token, ++row)
      std::memcpy(selected.data() + row * dim, hidden.data() + token * dim,
                  sizeof(float) * size_t(dim));
  }
  normalize(cpu::RowShape{numRows, dim, dim, dim}, selected.data(),
            modelWeights->outputNorm().data(), selected.data());
  const cpu::PackedQuantMatrix *head = modelWeights->quantizedOutput();
  // The 4/8-bit head serves every last-token row (its rows are
  // independent of each other); full-sequence logits (perplexity) take the
  // packed GEMM.
  if (head && (llamaNumerics || (quantizedDecode && !anyAllLogits))) {
    cpu::quantizeActivations(selected.data(), numRows, dim, dim, head->format,
                             quantizedActivations);
    cpu::quantGemv(*head, quantizedActivations, output.logits.data(),
                   config.vocabSize);
    return llvm::Error::success();
  }
  return gemm->multiply(modelWeights->output(), selected.data(), numRows,
                        output.logits.data());
}

} // namespace spanc::model
