//===- PagedAttention.cu - Paged causal attention on CUDA devices ---------===//
//
// One thread block per work item (AttentionPlan.h): a tile of up to 64
// query rows of one sequence and KV head against its visible pages, range
// by range. Per page the block stages K (rotated at its logical indices
// when the kernel applies RoPE) and V in shared memory as f32, scores
// every (row, visible slot), folds them into per-row online softmax states
// and rescales the accumulators (in registers: each thread owns the same
// elements of the tile's [row][dim] accumulators throughout): never a
// score row in global memory. Each range's state starts from scratch and
// is merged into the row's running state in page order (AttentionMath.h);
// an item that is one range of a split tile writes its range state
// instead, and the merge launch merges a tile's ranges in the same order
// with the same arithmetic, so a row's bits never depend on how its tile
// was cut.
//
// This is the straightforward kernel (no tensor cores, one block staged at
// a time, every product in f32): the reference the tensor-core kernel
// (PagedAttentionMma.cu, the default where it fits) is tested against, and
// the kernel for f32 K/V and shapes that one does not take.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/PagedAttention.h"

#include "runtime/kernels/cuda/AttentionMath.h"
#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/KvMath.h"
#include "runtime/kernels/cuda/PagedAttentionKernels.h"

namespace spanc::cuda {

namespace {

constexpr int kAttentionThreads = 256;
static_assert(kAttentionThreads >= kAttentionMaxTileRows,
              "the per-row steps run a thread per tile row");
/// Accumulator values each thread keeps in registers: thread t owns
/// elements t, t + 256, ... of the tile's [row][dim] accumulators.
constexpr int kValuesPerThread = 32;
static_assert(kValuesPerThread * kAttentionThreads >=
                  kAttentionMaxTileRows * 128,
              "64-row tiles up to head dim 128 fit the registers");
constexpr int kMergeThreads = 128;

using detail::AttentionParams;

/// Stages one block of one KV head in shared memory as f32 (K
/// dimension-major, V slot-major, as stored) and, with rope-in-kernel,
/// turns each valid slot's K to its logical index. Ends with a barrier.
template <typename Element>
__device__ void stageBlock(const AttentionParams &params, int kvHead,
                           int64_t block, int valid, int64_t logicalStart,
                           float *keys, float *values) {
  const PagedKvView &kv = params.kv;
  const int headDim = params.shape.headDim, blockSize = kv.blockSize;
  const Element *keyLayer = static_cast<const Element *>(kv.keys);
  const Element *valueLayer = static_cast<const Element *>(kv.values);
  for (int index = threadIdx.x; index < headDim * blockSize;
       index += blockDim.x) {
    keys[index] = loadKv(
        keyLayer + keyOffset(kv.blockStride, kv.headStride, blockSize, block,
                             kvHead, index % blockSize, index / blockSize));
    values[index] = loadKv(
        valueLayer + valueOffset(kv.blockStride, kv.headStride, headDim, block,
                                 kvHead, index / headDim, index % headDim));
  }
  __syncthreads();
  if (!params.keyRope.cosSin)
    return;
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

template <typename Element, typename Output>
__global__ void __launch_bounds__(kAttentionThreads)
    pagedAttentionKernel(AttentionParams params, Output *output) {
  extern __shared__ float shared[];
  __shared__ int64_t limits[kAttentionMaxTileRows];
  // The current range's state and the running state of the ranges before,
  // per row.
  __shared__ float maxScores[kAttentionMaxTileRows];
  __shared__ float sums[kAttentionMaxTileRows];
  __shared__ float corrections[kAttentionMaxTileRows];
  __shared__ float runningMax[kAttentionMaxTileRows];
  __shared__ float runningSum[kAttentionMaxTileRows];
  __shared__ float keepFactors[kAttentionMaxTileRows];
  __shared__ float addFactors[kAttentionMaxTileRows];

  const PagedAttentionShape &shape = params.shape;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const AttentionWorkItem item = arrays.items[blockIdx.x];
  const int headDim = shape.headDim;
  const int blockSize = params.kv.blockSize;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int rows = item.numRows;
  const int tileValues = rows * headDim;

  float *query = shared;                           // [tileRows][headDim]
  float *keys = query + params.tileRows * headDim; // [headDim][blockSize]
  float *values = keys + headDim * blockSize;      // [blockSize][headDim]
  float *scores = values + blockSize * headDim;    // [tileRows][blockSize]
  // This thread's accumulator values: element threadIdx.x + k *
  // kAttentionThreads of the tile's [row][dim], for the range and running.
  float accumulator[kValuesPerThread], running[kValuesPerThread];

  const int32_t firstQueryRow = arrays.queryOffsets[item.sequence];
  const int64_t numQueries =
      arrays.queryOffsets[item.sequence + 1] - firstQueryRow;
  const int32_t lastPage = arrays.pageOffsets[item.sequence + 1] - 1;
  const int64_t length =
      int64_t(arrays.pageStarts[lastPage]) + arrays.validTokens[lastPage];

  for (int index = threadIdx.x; index < tileValues; index += blockDim.x) {
    const int row = index / headDim, dim = index % headDim;
    const int64_t tileRow = item.firstRow + row;
    const int64_t token = tileRowToken(tileRow, groupSize);
    const int head = tileRowHead(item.kvHead, tileRow, groupSize);
    query[index] =
        params.queries[(firstQueryRow + token) * shape.queryRowStride +
                       int64_t(head) * headDim + dim] *
        shape.scale;
  }
#pragma unroll
  for (int k = 0; k < kValuesPerThread; ++k)
    running[k] = 0.0f;
  if (threadIdx.x < rows) {
    const int64_t token = tileRowToken(item.firstRow + threadIdx.x, groupSize);
    limits[threadIdx.x] = queryLimit(length, numQueries, token);
    runningMax[threadIdx.x] = -INFINITY;
    runningSum[threadIdx.x] = 0.0f;
  }

  for (int32_t rangeBegin = item.pageBegin; rangeBegin < item.pageEnd;
       rangeBegin += item.rangePages) {
    const int32_t rangeEnd = min(item.pageEnd, rangeBegin + item.rangePages);
    // A fresh state per range.
#pragma unroll
    for (int k = 0; k < kValuesPerThread; ++k)
      accumulator[k] = 0.0f;
    if (threadIdx.x < rows) {
      maxScores[threadIdx.x] = -INFINITY;
      sums[threadIdx.x] = 0.0f;
    }
    __syncthreads();
    for (int32_t page = rangeBegin; page < rangeEnd; ++page) {
      const int valid = arrays.validTokens[page];
      if (valid == 0)
        continue;
      const int64_t logicalStart = arrays.pageStarts[page];
      stageBlock<Element>(params, item.kvHead, arrays.blockIds[page], valid,
                          logicalStart, keys, values);
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
#pragma unroll
      for (int k = 0; k < kValuesPerThread; ++k) {
        const int index = threadIdx.x + k * kAttentionThreads;
        if (index < tileValues) {
          const int row = index / headDim, dim = index % headDim;
          const int count = visibleSlots(valid, logicalStart, limits[row]);
          if (count > 0) {
            const float *weights = scores + row * blockSize;
            float sum = accumulator[k] * corrections[row];
            for (int slot = 0; slot < count; ++slot)
              sum += weights[slot] * values[slot * headDim + dim];
            accumulator[k] = sum;
          }
        }
      }
      __syncthreads();
    }
    if (item.partial >= 0)
      break; // one range of a split tile: its state is the result
    // Merge the range into the running state (rows that saw nothing in it
    // keep theirs).
    if (threadIdx.x < rows) {
      const int row = threadIdx.x;
      float keep = 1.0f, add = 0.0f;
      if (sums[row] > 0) {
        float newMax;
        mergeFactors(runningMax[row], maxScores[row], newMax, keep, add);
        runningSum[row] = mergeValue(runningSum[row], keep, sums[row], add);
        runningMax[row] = newMax;
      }
      keepFactors[row] = keep;
      addFactors[row] = add;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kValuesPerThread; ++k) {
      const int index = threadIdx.x + k * kAttentionThreads;
      if (index < tileValues && sums[index / headDim] > 0)
        running[k] = mergeValue(running[k], keepFactors[index / headDim],
                                accumulator[k], addFactors[index / headDim]);
    }
    __syncthreads();
  }
  __syncthreads();

  if (item.partial >= 0) {
    // The range's state: per row max, sum, then the accumulator values.
    float *state = arrays.partials + item.partial;
    if (threadIdx.x < rows) {
      state[attentionStateFloats(threadIdx.x, headDim)] =
          maxScores[threadIdx.x];
      state[attentionStateFloats(threadIdx.x, headDim) + 1] = sums[threadIdx.x];
    }
#pragma unroll
    for (int k = 0; k < kValuesPerThread; ++k) {
      const int index = threadIdx.x + k * kAttentionThreads;
      if (index < tileValues)
        state[attentionStateFloats(index / headDim, headDim) + 2 +
              index % headDim] = accumulator[k];
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kValuesPerThread; ++k) {
    const int index = threadIdx.x + k * kAttentionThreads;
    if (index < tileValues) {
      const int row = index / headDim, dim = index % headDim;
      const int64_t tileRow = item.firstRow + row;
      const int64_t token = tileRowToken(tileRow, groupSize);
      const int head = tileRowHead(item.kvHead, tileRow, groupSize);
      storeActivation(output + (firstQueryRow + token) * shape.outputRowStride +
                          int64_t(head) * headDim + dim,
                      attentionOutput(running[k], runningSum[row]));
    }
  }
}

// One block per split tile: its range states merged in page order, with
// the attention kernel's merge arithmetic, one (row, dim) per thread.
template <typename Output>
__global__ void __launch_bounds__(kMergeThreads)
    mergeRangesKernel(AttentionParams params, Output *output) {
  const PagedAttentionShape &shape = params.shape;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const AttentionMergeGroup group = arrays.merges[blockIdx.x];
  const AttentionWorkItem first = arrays.items[group.firstItem];
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int32_t firstQueryRow = arrays.queryOffsets[first.sequence];
  for (int index = threadIdx.x; index < first.numRows * headDim;
       index += blockDim.x) {
    const int row = index / headDim, dim = index % headDim;
    float maxScore = -INFINITY, sum = 0.0f, value = 0.0f;
    for (int split = 0; split < group.numSplits; ++split) {
      const float *state = arrays.partials +
                           arrays.items[group.firstItem + split].partial +
                           attentionStateFloats(row, headDim);
      if (!(state[1] > 0))
        continue;
      float newMax, keep, add;
      mergeFactors(maxScore, state[0], newMax, keep, add);
      sum = mergeValue(sum, keep, state[1], add);
      value = mergeValue(value, keep, state[2 + dim], add);
      maxScore = newMax;
    }
    const int64_t tileRow = first.firstRow + row;
    const int64_t token = tileRowToken(tileRow, groupSize);
    const int head = tileRowHead(first.kvHead, tileRow, groupSize);
    storeActivation(output + (firstQueryRow + token) * shape.outputRowStride +
                        int64_t(head) * headDim + dim,
                    attentionOutput(value, sum));
  }
}

template <typename Element, typename Output>
Status launchAttention(const AttentionParams &params, int64_t numItems,
                       int64_t numMerges, bool tensorCores, Output *output,
                       Stream stream) {
  if (tensorCores) {
    SPANC_CUDA_TRY(
        detail::launchTensorCoreAttention(params, numItems, output, stream));
  } else {
    const int64_t sharedBytes = attentionSharedBytes(
        params.shape.headDim, params.kv.blockSize, params.tileRows);
    auto kernel = pagedAttentionKernel<Element, Output>;
    // Past the default 48 KiB a kernel must opt in (Hopper: up to 227 KiB).
    if (sharedBytes > 48 * 1024)
      SPANC_CUDA_CALL(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
          int(sharedBytes)));
    kernel<<<unsigned(numItems), kAttentionThreads, size_t(sharedBytes),
             stream>>>(params, output);
    SPANC_CUDA_TRY(launchStatus("pagedAttentionKernel"));
  }
  if (numMerges == 0)
    return Status::success();
  mergeRangesKernel<Output>
      <<<unsigned(numMerges), kMergeThreads, 0, stream>>>(params, output);
  return launchStatus("mergeRangesKernel");
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
  if (int64_t(plan.tileRows) * shape.headDim >
      int64_t(kValuesPerThread) * kAttentionThreads)
    return invalidArgument(
        "pagedAttention",
        "tiles of " + std::to_string(plan.tileRows) + " rows of head dim " +
            std::to_string(shape.headDim) + " exceed the kernel's registers");
  if (options.keyRope &&
      (options.keyRope->rotaryDim % 2 != 0 ||
       options.keyRope->rotaryDim > shape.headDim || !options.keyRope->cosSin))
    return invalidArgument("pagedAttention", "a malformed key RoPE table");
  const int64_t numItems = int64_t(plan.items.size());
  const int64_t numMerges = int64_t(plan.merges.size());
  // Chosen by the configuration alone (precision, shapes), never by the
  // step, so a row's bits do not depend on the rows beside it.
  const bool tensorCores =
      options.kernel == AttentionKernel::Auto &&
      detail::tensorCoreAttentionFits(shape, kv, plan.tileRows);
  if (kv.precision == KvPrecision::F16)
    return launchAttention<uint16_t>(params, numItems, numMerges, tensorCores,
                                     output, stream);
  return launchAttention<float>(params, numItems, numMerges, tensorCores,
                                output, stream);
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
  const size_t partialBytes = size_t(plan.numPartialFloats) * sizeof(float);
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
