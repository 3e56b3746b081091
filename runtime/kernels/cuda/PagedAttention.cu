//===- PagedAttention.cu - Paged causal attention on CUDA devices ---------===//
//
// One thread block per work item (AttentionPlan.h): a tile of up to 64
// query rows of one sequence and KV head against a range of its pages. Per
// page the block stages K (rotated at its logical indices when the kernel
// applies RoPE) and V in shared memory as f32, scores every (row, visible
// slot), folds them into per-row online softmax states and rescales the
// accumulators: never a score row in global memory. Items of a split tile
// write their (max, sum, accumulator) states; a merge launch combines them.
// The arithmetic per row and key is AttentionMath.h's.
//
// This is the straightforward kernel (no tensor cores, one block staged at
// a time); its job first is to agree with the CPU kernel.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/PagedAttention.h"

#include "runtime/kernels/cuda/AttentionMath.h"
#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/KvMath.h"

namespace spanc::cuda {

namespace {

constexpr int kAttentionThreads = 256;
static_assert(kAttentionThreads >= kAttentionMaxTileRows,
              "the softmax step runs a thread per tile row");
constexpr int kMergeThreads = 128;

struct AttentionParams {
  PagedAttentionShape shape;
  PagedKvView kv;
  AttentionWorkspace::DeviceArrays arrays;
  RopeTableView keyRope; ///< cosSin null: K is stored rotated
  const float *queries;
  int tileRows;
};

template <typename Element, typename Output>
__global__ void __launch_bounds__(kAttentionThreads)
    pagedAttentionKernel(AttentionParams params, Output *output) {
  extern __shared__ float shared[];
  __shared__ int64_t limits[kAttentionMaxTileRows];
  __shared__ float maxScores[kAttentionMaxTileRows];
  __shared__ float sums[kAttentionMaxTileRows];
  __shared__ float corrections[kAttentionMaxTileRows];

  const PagedAttentionShape &shape = params.shape;
  const PagedKvView &kv = params.kv;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const AttentionWorkItem item = arrays.items[blockIdx.x];
  const int headDim = shape.headDim;
  const int blockSize = kv.blockSize;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int rows = item.numRows;

  const int tileRows = params.tileRows;
  float *query = shared;                           // [tileRows][headDim]
  float *accumulator = query + tileRows * headDim; // [tileRows][headDim]
  float *keys = accumulator + tileRows * headDim;  // [headDim][blockSize]
  float *values = keys + headDim * blockSize;      // [blockSize][headDim]
  float *scores = values + blockSize * headDim;    // [tileRows][blockSize]

  const int32_t firstQueryRow = arrays.queryOffsets[item.sequence];
  const int64_t numQueries =
      arrays.queryOffsets[item.sequence + 1] - firstQueryRow;
  const int32_t lastPage = arrays.pageOffsets[item.sequence + 1] - 1;
  const int64_t length =
      int64_t(arrays.pageStarts[lastPage]) + arrays.validTokens[lastPage];

  for (int index = threadIdx.x; index < rows * headDim; index += blockDim.x) {
    const int row = index / headDim, dim = index % headDim;
    const int64_t tileRow = item.firstRow + row;
    const int64_t token = tileRowToken(tileRow, groupSize);
    const int head = tileRowHead(item.kvHead, tileRow, groupSize);
    query[index] =
        params.queries[(firstQueryRow + token) * shape.queryRowStride +
                       int64_t(head) * headDim + dim] *
        shape.scale;
    accumulator[index] = 0.0f;
  }
  if (threadIdx.x < rows) {
    const int64_t token = tileRowToken(item.firstRow + threadIdx.x, groupSize);
    limits[threadIdx.x] = queryLimit(length, numQueries, token);
    maxScores[threadIdx.x] = -INFINITY;
    sums[threadIdx.x] = 0.0f;
  }
  __syncthreads();

  const Element *keyLayer = static_cast<const Element *>(kv.keys);
  const Element *valueLayer = static_cast<const Element *>(kv.values);
  const bool rotate = params.keyRope.cosSin != nullptr;
  for (int32_t page = item.pageBegin; page < item.pageEnd; ++page) {
    const int valid = arrays.validTokens[page];
    if (valid == 0)
      continue;
    const int64_t logicalStart = arrays.pageStarts[page];
    const int64_t block = arrays.blockIds[page];
    // Stage the block: K dimension-major, V slot-major, both as stored.
    for (int index = threadIdx.x; index < headDim * blockSize;
         index += blockDim.x) {
      const int dim = index / blockSize, slot = index % blockSize;
      keys[index] =
          loadKv(keyLayer + keyOffset(kv.blockStride, kv.headStride, blockSize,
                                      block, item.kvHead, slot, dim));
      const int valueSlot = index / headDim, valueDim = index % headDim;
      values[index] = loadKv(
          valueLayer + valueOffset(kv.blockStride, kv.headStride, headDim,
                                   block, item.kvHead, valueSlot, valueDim));
    }
    __syncthreads();
    if (rotate) {
      // Rope-in-kernel: each valid slot turned to its logical index.
      const RopeTableView &table = params.keyRope;
      const int half = table.rotaryDim / 2;
      const bool neox = table.order == RopeOrder::NeoX;
      for (int index = threadIdx.x; index < half * valid; index += blockDim.x) {
        const int pair = index / valid, slot = index % valid;
        const float *cosSin =
            table.cosSin + (logicalStart + slot) * table.rotaryDim;
        int first, second;
        ropePairDims(neox, table.rotaryDim, pair, first, second);
        float *a = keys + first * blockSize + slot;
        float *b = keys + second * blockSize + slot;
        rotatePair(*a, *b, cosSin[pair], cosSin[half + pair], *a, *b);
      }
      __syncthreads();
    }
    // Scores of every (row, slot) the row sees; -inf elsewhere.
    for (int index = threadIdx.x; index < rows * blockSize;
         index += blockDim.x) {
      const int row = index / blockSize, slot = index % blockSize;
      float score = -INFINITY;
      if (slot < visibleSlots(valid, logicalStart, limits[row])) {
        score = 0.0f;
        const float *q = query + row * headDim;
        for (int dim = 0; dim < headDim; ++dim)
          score += q[dim] * keys[dim * blockSize + slot];
      }
      scores[index] = score;
    }
    __syncthreads();
    // The online softmax per row: scores become weights.
    if (threadIdx.x < rows) {
      const int row = threadIdx.x;
      const int count = visibleSlots(valid, logicalStart, limits[row]);
      float *rowScores = scores + row * blockSize;
      if (count == 0) {
        corrections[row] = 1.0f;
      } else {
        float blockMax = -INFINITY;
        for (int slot = 0; slot < count; ++slot)
          blockMax = fmaxf(blockMax, rowScores[slot]);
        const float newMax = softmaxNewMax(maxScores[row], blockMax);
        const float correction = softmaxCorrection(maxScores[row], newMax);
        float blockSum = 0.0f;
        for (int slot = 0; slot < blockSize; ++slot) {
          const float weight =
              slot < count ? softmaxWeight(rowScores[slot], newMax) : 0.0f;
          rowScores[slot] = weight;
          blockSum += weight;
        }
        sums[row] = sums[row] * correction + blockSum;
        maxScores[row] = newMax;
        corrections[row] = correction;
      }
    }
    __syncthreads();
    for (int index = threadIdx.x; index < rows * headDim; index += blockDim.x) {
      const int row = index / headDim, dim = index % headDim;
      const int count = visibleSlots(valid, logicalStart, limits[row]);
      if (count == 0)
        continue;
      const float *weights = scores + row * blockSize;
      float sum = accumulator[index] * corrections[row];
      for (int slot = 0; slot < count; ++slot)
        sum += weights[slot] * values[slot * headDim + dim];
      accumulator[index] = sum;
    }
    __syncthreads();
  }

  if (item.partial >= 0) {
    float *state =
        arrays.partials +
        int64_t(item.partial) * attentionPartialFloats(tileRows, headDim);
    for (int index = threadIdx.x; index < rows * (2 + headDim);
         index += blockDim.x) {
      const int row = index / (2 + headDim), field = index % (2 + headDim);
      state[index] = field == 0   ? maxScores[row]
                     : field == 1 ? sums[row]
                                  : accumulator[row * headDim + field - 2];
    }
    return;
  }
  for (int index = threadIdx.x; index < rows * headDim; index += blockDim.x) {
    const int row = index / headDim, dim = index % headDim;
    const int64_t tileRow = item.firstRow + row;
    const int64_t token = tileRowToken(tileRow, groupSize);
    const int head = tileRowHead(item.kvHead, tileRow, groupSize);
    storeActivation(output + (firstQueryRow + token) * shape.outputRowStride +
                        int64_t(head) * headDim + dim,
                    accumulator[index] * softmaxNormalizer(sums[row]));
  }
}

// One block per split tile: out = sum_i acc_i w_i / sum_i sum_i w_i with
// w_i = e^(max_i - max), over the splits that saw any key.
template <typename Output>
__global__ void __launch_bounds__(kMergeThreads)
    mergeSplitsKernel(AttentionParams params, Output *output) {
  const PagedAttentionShape &shape = params.shape;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const AttentionMergeGroup group = arrays.merges[blockIdx.x];
  const AttentionWorkItem first = arrays.items[group.firstItem];
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int64_t stateFloats = attentionPartialFloats(params.tileRows, headDim);
  const int32_t firstQueryRow = arrays.queryOffsets[first.sequence];
  for (int index = threadIdx.x; index < first.numRows * headDim;
       index += blockDim.x) {
    const int row = index / headDim, dim = index % headDim;
    float groupMax = -INFINITY;
    for (int split = 0; split < group.numSplits; ++split) {
      const float *state = arrays.partials +
                           (first.partial + split) * stateFloats +
                           row * (2 + headDim);
      if (state[1] > 0)
        groupMax = fmaxf(groupMax, state[0]);
    }
    float total = 0.0f, value = 0.0f;
    for (int split = 0; split < group.numSplits; ++split) {
      const float *state = arrays.partials +
                           (first.partial + split) * stateFloats +
                           row * (2 + headDim);
      if (!(state[1] > 0))
        continue;
      const float weight = softmaxWeight(state[0], groupMax);
      total += state[1] * weight;
      value += state[2 + dim] * weight;
    }
    const int64_t tileRow = first.firstRow + row;
    const int64_t token = tileRowToken(tileRow, groupSize);
    const int head = tileRowHead(first.kvHead, tileRow, groupSize);
    storeActivation(output + (firstQueryRow + token) * shape.outputRowStride +
                        int64_t(head) * headDim + dim,
                    total > 0 ? value / total : 0.0f);
  }
}

template <typename Element, typename Output>
Status launchAttention(const AttentionParams &params, int64_t numItems,
                       int64_t numMerges, Output *output, Stream stream) {
  const int64_t sharedBytes = attentionSharedBytes(
      params.shape.headDim, params.kv.blockSize, params.tileRows);
  auto kernel = pagedAttentionKernel<Element, Output>;
  // Past the default 48 KiB a kernel must opt in (Hopper: up to 227 KiB).
  if (sharedBytes > 48 * 1024)
    SPANC_CUDA_CALL(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sharedBytes)));
  kernel<<<unsigned(numItems), kAttentionThreads, size_t(sharedBytes),
           stream>>>(params, output);
  SPANC_CUDA_TRY(launchStatus("pagedAttentionKernel"));
  if (numMerges == 0)
    return Status::success();
  mergeSplitsKernel<Output>
      <<<unsigned(numMerges), kMergeThreads, 0, stream>>>(params, output);
  return launchStatus("mergeSplitsKernel");
}

template <typename Output>
Status runAttention(const PagedAttentionShape &shape,
                    const AttentionWorkspace &workspace, const PagedKvView &kv,
                    const float *queries, Output *output,
                    const PagedAttentionOptions &options, Stream stream) {
  const AttentionPlan &plan = workspace.plan();
  if (plan.items.empty())
    return Status::success();
  if (kv.blockSize != workspace.blockSize())
    return invalidArgument(
        "pagedAttention",
        "the K/V view's block size " + std::to_string(kv.blockSize) +
            " is not the workspace's " + std::to_string(workspace.blockSize()));
  AttentionParams params;
  params.shape = shape;
  params.kv = kv;
  params.arrays = workspace.device();
  params.keyRope = options.keyRope ? *options.keyRope : RopeTableView();
  params.queries = queries;
  params.tileRows = plan.tileRows;
  if (options.keyRope &&
      (options.keyRope->rotaryDim % 2 != 0 ||
       options.keyRope->rotaryDim > shape.headDim || !options.keyRope->cosSin))
    return invalidArgument("pagedAttention", "a malformed key RoPE table");
  const int64_t numItems = int64_t(plan.items.size());
  const int64_t numMerges = int64_t(plan.merges.size());
  if (kv.precision == KvPrecision::F16)
    return launchAttention<uint16_t>(params, numItems, numMerges, output,
                                     stream);
  return launchAttention<float>(params, numItems, numMerges, output, stream);
}

} // namespace

Status AttentionWorkspace::prepare(const PagedAttentionShape &shape,
                                   const PagedAttentionBatch &batch,
                                   int blockSize,
                                   const AttentionPlanOptions &options,
                                   Stream stream) {
  AttentionPlan plan;
  SPANC_CUDA_TRY(buildAttentionPlan(shape, batch, blockSize, options, plan));
  packAttentionPlan(plan, batch, packed_);
  const size_t bytes = packed_.words.size() * sizeof(int32_t);
  SPANC_CUDA_TRY(indices_.reserve(bytes));
  const size_t partialBytes =
      size_t(plan.numPartials) *
      size_t(attentionPartialFloats(plan.tileRows, shape.headDim)) *
      sizeof(float);
  SPANC_CUDA_TRY(partials_.reserve(partialBytes));
  SPANC_CUDA_TRY(
      copyToDevice(indices_.data(), packed_.words.data(), bytes, stream));
  const int32_t *base = indices_.as<int32_t>();
  device_.queryOffsets = base + packed_.queryOffsets;
  device_.pageOffsets = base + packed_.pageOffsets;
  device_.blockIds = base + packed_.blockIds;
  device_.validTokens = base + packed_.validTokens;
  device_.pageStarts = base + packed_.pageStarts;
  device_.items =
      reinterpret_cast<const AttentionWorkItem *>(base + packed_.items);
  device_.merges =
      reinterpret_cast<const AttentionMergeGroup *>(base + packed_.merges);
  device_.partials = partials_.as<float>();
  plan_ = std::move(plan);
  shape_ = shape;
  blockSize_ = blockSize;
  return Status::success();
}

Status pagedAttention(const PagedAttentionShape &shape,
                      const AttentionWorkspace &workspace,
                      const PagedKvView &kv, const float *queries,
                      float *output, const PagedAttentionOptions &options,
                      Stream stream) {
  return runAttention(shape, workspace, kv, queries, output, options, stream);
}

Status pagedAttention(const PagedAttentionShape &shape,
                      const AttentionWorkspace &workspace,
                      const PagedKvView &kv, const float *queries,
                      uint16_t *output, const PagedAttentionOptions &options,
                      Stream stream) {
  return runAttention(shape, workspace, kv, queries, output, options, stream);
}

} // namespace spanc::cuda
