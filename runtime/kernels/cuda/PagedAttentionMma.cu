//===- PagedAttentionMma.cu - Paged causal attention on tensor cores ------===//
//
// The same work items, ranges and merge as PagedAttention.cu's SIMT kernel
// (AttentionPlan.h), with QK^T and PV on the tensor cores (WMMA 16x16x16,
// f16 in, f32 accumulated). Four warps own 16 tile rows each; the block
// stages K and V of four pages (a 64-key chunk) in shared memory as f16
// (K dimension-major as stored, so it is K^T row-major; rope-in-kernel
// turns each valid key at its logical index in f32 and rounds it to f16),
// each warp scores its rows against the chunk, folds the scores into its
// rows' online softmax in f32 (two lanes a row), rounds the weights to f16
// and accumulates P V into its rows' f32 accumulators, which stay in
// shared memory so a row's correction can scale them.
//
// What changes against the SIMT kernel: queries, rotated keys and softmax
// weights are rounded to f16 (2^-11 relative) before their products, as
// every tensor-core attention does (the CPU's AMX path rounds to bf16); the
// softmax folds 64 keys at a time instead of 16. What does not: a row's
// bits depend only on its query, its page list and its range cut, never on
// the rows beside it (each output element of a tensor-core product is its
// own dot product; padding rows are zeros; invisible keys weigh an exact 0
// against V zeroed past a page's valid slots), so hits still give the
// miss's bits and split tiles their whole tile's.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/PagedAttentionKernels.h"

#include "runtime/kernels/cuda/AttentionMath.h"
#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/KvMath.h"

#include <cuda_fp16.h>
#include <mma.h>

namespace spanc::cuda::detail {

namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;
constexpr int kChunkPages = 4;
constexpr int kBlockSlots = 16;
constexpr int kChunkSlots = kChunkPages * kBlockSlots;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kWarps * kWarpRows == kAttentionMaxTileRows,
              "four warps of 16 rows cover a 64-row tile");

using HalfA = wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major>;
using HalfB = wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major>;
using FloatC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Bytes of one warp's shared memory for head dim `headDim`: its rows'
/// f16 queries, f32 scores, f16 weights, f32 range accumulators and f32
/// running accumulators. Every part starts 32-byte aligned (WMMA's rule)
/// since headDim is a multiple of 16.
constexpr int64_t warpSharedBytes(int headDim) {
  return int64_t(kWarpRows) * headDim * 2 + kWarpRows * kChunkSlots * 4 +
         kWarpRows * kChunkSlots * 2 + 2 * int64_t(kWarpRows) * headDim * 4;
}

/// The block's: the chunk's K^T and V in f16, then each warp's.
constexpr int64_t tensorCoreSharedBytes(int headDim) {
  return 2 * int64_t(headDim) * kChunkSlots * 2 +
         kWarps * warpSharedBytes(headDim);
}

/// Stages pages [chunk, chunk + pages) of the range (as many as are left,
/// up to four) into keysT ([dim][64], chunk slot = page * 16 + slot) and
/// values ([64][dim]); slots past a page's valid count (and pages past the
/// range) are zeros. With rope-in-kernel each valid key is turned at its
/// logical index. Ends with a barrier.
template <int kHeadDim>
__device__ void stageChunk(const AttentionParams &params, int kvHead,
                           int32_t chunk, int pages, const int *valid,
                           const int32_t *starts, half *keysT, half *values) {
  const PagedKvView &kv = params.kv;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const uint16_t *keyLayer = static_cast<const uint16_t *>(kv.keys);
  const uint16_t *valueLayer = static_cast<const uint16_t *>(kv.values);
  for (int index = threadIdx.x; index < kHeadDim * kChunkSlots;
       index += kThreads) {
    // K: index walks [dim][chunk slot]; V: [chunk slot][dim].
    const int keyDim = index / kChunkSlots, keySlot = index % kChunkSlots;
    const int keyPage = keySlot / kBlockSlots,
              keyInPage = keySlot % kBlockSlots;
    uint16_t keyBits = 0;
    if (keyPage < pages && keyInPage < valid[keyPage])
      keyBits = keyLayer[keyOffset(kv.blockStride, kv.headStride, kBlockSlots,
                                   arrays.blockIds[chunk + keyPage], kvHead,
                                   keyInPage, keyDim)];
    keysT[index] = __ushort_as_half(keyBits);
    const int valueSlot = index / kHeadDim, valueDim = index % kHeadDim;
    const int valuePage = valueSlot / kBlockSlots;
    const int valueInPage = valueSlot % kBlockSlots;
    uint16_t valueBits = 0;
    if (valuePage < pages && valueInPage < valid[valuePage])
      valueBits = valueLayer[valueOffset(
          kv.blockStride, kv.headStride, kHeadDim,
          arrays.blockIds[chunk + valuePage], kvHead, valueInPage, valueDim)];
    values[index] = __ushort_as_half(valueBits);
  }
  __syncthreads();
  if (!params.keyRope.cosSin)
    return;
  const RopeTableView &table = params.keyRope;
  const int halfDims = table.rotaryDim / 2;
  const bool neox = table.order == RopeOrder::NeoX;
  for (int index = threadIdx.x; index < halfDims * kChunkSlots;
       index += kThreads) {
    const int pair = index / kChunkSlots, slot = index % kChunkSlots;
    const int page = slot / kBlockSlots, inPage = slot % kBlockSlots;
    if (page >= pages || inPage >= valid[page])
      continue;
    const float *cosSin =
        table.cosSin + (int64_t(starts[page]) + inPage) * table.rotaryDim;
    int first, second;
    ropePairDims(neox, table.rotaryDim, pair, first, second);
    half *a = keysT + first * kChunkSlots + slot;
    half *b = keysT + second * kChunkSlots + slot;
    float turnedA, turnedB;
    rotatePair(__half2float(*a), __half2float(*b), cosSin[pair],
               cosSin[halfDims + pair], turnedA, turnedB);
    *a = __float2half_rn(turnedA);
    *b = __float2half_rn(turnedB);
  }
  __syncthreads();
}

template <int kHeadDim, typename Output>
__global__ void __launch_bounds__(kThreads)
    tensorCoreAttentionKernel(AttentionParams params, Output *output) {
  constexpr int kDimTiles = kHeadDim / 16;
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ int chunkValid[kChunkPages];
  __shared__ int32_t chunkStarts[kChunkPages];

  const PagedAttentionShape &shape = params.shape;
  const AttentionWorkspace::DeviceArrays &arrays = params.arrays;
  const AttentionWorkItem item = arrays.items[blockIdx.x];
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  half *keysT = reinterpret_cast<half *>(shared); // [dim][64]
  half *values = keysT + kHeadDim * kChunkSlots;  // [64][dim]
  unsigned char *mine = shared + 2 * kHeadDim * kChunkSlots * 2 +
                        warp * warpSharedBytes(kHeadDim);
  half *query = reinterpret_cast<half *>(mine); // [16][dim]
  float *scores = reinterpret_cast<float *>(query + kWarpRows * kHeadDim);
  half *weights = reinterpret_cast<half *>(scores + kWarpRows * kChunkSlots);
  float *accumulator =
      reinterpret_cast<float *>(weights + kWarpRows * kChunkSlots);
  float *running = accumulator + kWarpRows * kHeadDim;

  const int32_t firstQueryRow = arrays.queryOffsets[item.sequence];
  const int64_t numQueries =
      arrays.queryOffsets[item.sequence + 1] - firstQueryRow;
  const int32_t lastPage = arrays.pageOffsets[item.sequence + 1] - 1;
  const int64_t length =
      int64_t(arrays.pageStarts[lastPage]) + arrays.validTokens[lastPage];

  // This warp's rows, scaled and rounded to f16 (zeros past the tile).
  const int warpFirstRow = warp * kWarpRows;
  const bool warpHasRows = warpFirstRow < item.numRows;
  for (int index = lane; index < kWarpRows * kHeadDim; index += 32) {
    const int row = warpFirstRow + index / kHeadDim, dim = index % kHeadDim;
    float value = 0.0f;
    if (row < item.numRows) {
      const int64_t tileRow = item.firstRow + row;
      const int64_t token = tileRowToken(tileRow, groupSize);
      const int head = tileRowHead(item.kvHead, tileRow, groupSize);
      value = params.queries[(firstQueryRow + token) * shape.queryRowStride +
                             int64_t(head) * kHeadDim + dim] *
              shape.scale;
    }
    query[index] = __float2half_rn(value);
    running[index] = 0.0f;
  }
  // Two lanes per row: `side` 0 takes chunk slots 0-31 and dims of the
  // first half, side 1 the rest. Both keep the row's softmax state.
  const int myRow = lane / 2, side = lane % 2;
  const int tileRow = warpFirstRow + myRow;
  const bool rowLive = tileRow < item.numRows;
  // -1 sees nothing (logical indices start at 0).
  const int64_t limit =
      rowLive ? queryLimit(length, numQueries,
                           tileRowToken(item.firstRow + tileRow, groupSize))
              : -1;
  constexpr int kSideDims = kHeadDim / 2;
  float runningMax = -INFINITY, runningSum = 0.0f;
  float rangeMax = -INFINITY, rangeSum = 0.0f;

  for (int32_t rangeBegin = item.pageBegin; rangeBegin < item.pageEnd;
       rangeBegin += item.rangePages) {
    const int32_t rangeEnd = min(item.pageEnd, rangeBegin + item.rangePages);
    rangeMax = -INFINITY;
    rangeSum = 0.0f;
    for (int index = lane; index < kWarpRows * kHeadDim; index += 32)
      accumulator[index] = 0.0f;
    for (int32_t chunk = rangeBegin; chunk < rangeEnd; chunk += kChunkPages) {
      const int pages = min(kChunkPages, rangeEnd - chunk);
      __syncthreads(); // every warp is done with the last chunk
      if (threadIdx.x < kChunkPages) {
        const bool inRange = int(threadIdx.x) < pages;
        chunkValid[threadIdx.x] =
            inRange ? arrays.validTokens[chunk + threadIdx.x] : 0;
        chunkStarts[threadIdx.x] =
            inRange ? arrays.pageStarts[chunk + threadIdx.x] : 0;
      }
      __syncthreads();
      stageChunk<kHeadDim>(params, item.kvHead, chunk, pages, chunkValid,
                           chunkStarts, keysT, values);
      if (!warpHasRows)
        continue;

      // S = Q K^T for the warp's 16 rows and the chunk's 64 keys.
      for (int n = 0; n < kChunkSlots / 16; ++n) {
        FloatC product;
        wmma::fill_fragment(product, 0.0f);
#pragma unroll
        for (int k = 0; k < kDimTiles; ++k) {
          HalfA a;
          HalfB b;
          wmma::load_matrix_sync(a, query + k * 16, kHeadDim);
          wmma::load_matrix_sync(b, keysT + k * 16 * kChunkSlots + n * 16,
                                 kChunkSlots);
          wmma::mma_sync(product, a, b, product);
        }
        wmma::store_matrix_sync(scores + n * 16, product, kChunkSlots,
                                wmma::mem_row_major);
      }
      __syncwarp();

      // The online softmax of the row over the slots it sees.
      const float *rowScores = scores + myRow * kChunkSlots;
      half *rowWeights = weights + myRow * kChunkSlots;
      const int firstSlot = side * (kChunkSlots / 2);
      // This side's two pages: how many of their slots the row sees.
      const int seenFirst =
          visibleSlots(chunkValid[side * 2], chunkStarts[side * 2], limit);
      const int seenSecond = visibleSlots(chunkValid[side * 2 + 1],
                                          chunkStarts[side * 2 + 1], limit);
      auto seen = [&](int slot) {
        return slot < kBlockSlots ? slot < seenFirst
                                  : slot - kBlockSlots < seenSecond;
      };
      float sideMax = -INFINITY;
      for (int slot = 0; slot < kChunkSlots / 2; ++slot)
        if (seen(slot))
          sideMax = fmaxf(sideMax, rowScores[firstSlot + slot]);
      const float chunkMax =
          fmaxf(sideMax, __shfl_xor_sync(kFullMask, sideMax, 1));
      float newMax = rangeMax, correction = 1.0f;
      if (chunkMax != -INFINITY) {
        newMax = softmaxNewMax(rangeMax, chunkMax);
        correction = softmaxCorrection(rangeMax, newMax);
      }
      float sideSum = 0.0f;
      for (int slot = 0; slot < kChunkSlots / 2; ++slot) {
        half weight = __float2half_rn(0.0f);
        if (seen(slot))
          weight = __float2half_rn(
              softmaxWeight(rowScores[firstSlot + slot], newMax));
        rowWeights[firstSlot + slot] = weight;
        sideSum += __half2float(weight);
      }
      // Both lanes add the two halves in the same order.
      const float otherSum = __shfl_xor_sync(kFullMask, sideSum, 1);
      const float chunkSum =
          side == 0 ? sideSum + otherSum : otherSum + sideSum;
      if (chunkMax != -INFINITY) {
        rangeSum = rangeSum * correction + chunkSum;
        rangeMax = newMax;
        float *rowAccumulator = accumulator + myRow * kHeadDim;
        for (int dim = side * kSideDims; dim < (side + 1) * kSideDims; ++dim)
          rowAccumulator[dim] *= correction;
      }
      __syncwarp();

      // O += P V.
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        FloatC sum;
        wmma::load_matrix_sync(sum, accumulator + n * 16, kHeadDim,
                               wmma::mem_row_major);
#pragma unroll
        for (int k = 0; k < kChunkSlots / 16; ++k) {
          HalfA a;
          HalfB b;
          wmma::load_matrix_sync(a, weights + k * 16, kChunkSlots);
          wmma::load_matrix_sync(b, values + k * 16 * kHeadDim + n * 16,
                                 kHeadDim);
          wmma::mma_sync(sum, a, b, sum);
        }
        wmma::store_matrix_sync(accumulator + n * 16, sum, kHeadDim,
                                wmma::mem_row_major);
      }
      __syncwarp();
    }
    if (item.partial >= 0)
      break; // one range of a split tile: its state is the result
    // Merge the range into the running state (a row that saw nothing in it
    // keeps its own).
    if (rangeSum > 0) {
      float newMax, keep, add;
      mergeFactors(runningMax, rangeMax, newMax, keep, add);
      runningSum = mergeValue(runningSum, keep, rangeSum, add);
      runningMax = newMax;
      const float *rowAccumulator = accumulator + myRow * kHeadDim;
      float *rowRunning = running + myRow * kHeadDim;
      for (int dim = side * kSideDims; dim < (side + 1) * kSideDims; ++dim)
        rowRunning[dim] =
            mergeValue(rowRunning[dim], keep, rowAccumulator[dim], add);
    }
    __syncwarp();
  }
  if (!rowLive)
    return;
  const int64_t tileRowIndex = item.firstRow + tileRow;
  if (item.partial >= 0) {
    // The range's state: max, sum, then the accumulator values.
    float *state = arrays.partials + item.partial +
                   attentionStateFloats(tileRow, kHeadDim);
    if (side == 0) {
      state[0] = rangeMax;
      state[1] = rangeSum;
    }
    const float *rowAccumulator = accumulator + myRow * kHeadDim;
    for (int dim = side * kSideDims; dim < (side + 1) * kSideDims; ++dim)
      state[2 + dim] = rowAccumulator[dim];
    return;
  }
  const int64_t token = tileRowToken(tileRowIndex, groupSize);
  const int head = tileRowHead(item.kvHead, tileRowIndex, groupSize);
  Output *rowOutput = output + (firstQueryRow + token) * shape.outputRowStride +
                      int64_t(head) * kHeadDim;
  const float *rowRunning = running + myRow * kHeadDim;
  for (int dim = side * kSideDims; dim < (side + 1) * kSideDims; ++dim)
    storeActivation(rowOutput + dim,
                    attentionOutput(rowRunning[dim], runningSum));
}

template <int kHeadDim, typename Output>
Status launchFor(const AttentionParams &params, int64_t numItems,
                 Output *output, Stream stream) {
  const int64_t sharedBytes = tensorCoreSharedBytes(kHeadDim);
  auto kernel = tensorCoreAttentionKernel<kHeadDim, Output>;
  if (sharedBytes > 48 * 1024)
    SPANC_CUDA_CALL(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sharedBytes)));
  kernel<<<unsigned(numItems), kThreads, size_t(sharedBytes), stream>>>(params,
                                                                        output);
  return launchStatus("tensorCoreAttentionKernel");
}

template <typename Output>
Status launch(const AttentionParams &params, int64_t numItems, Output *output,
              Stream stream) {
  switch (params.shape.headDim) {
  case 16:
    return launchFor<16>(params, numItems, output, stream);
  case 32:
    return launchFor<32>(params, numItems, output, stream);
  case 48:
    return launchFor<48>(params, numItems, output, stream);
  case 64:
    return launchFor<64>(params, numItems, output, stream);
  case 80:
    return launchFor<80>(params, numItems, output, stream);
  case 96:
    return launchFor<96>(params, numItems, output, stream);
  case 112:
    return launchFor<112>(params, numItems, output, stream);
  case 128:
    return launchFor<128>(params, numItems, output, stream);
  default:
    return invalidArgument("pagedAttention",
                           "the tensor-core kernel has no head dim " +
                               std::to_string(params.shape.headDim));
  }
}

} // namespace

bool tensorCoreAttentionFits(const PagedAttentionShape &shape,
                             const PagedKvView &kv, int tileRows) {
  return kv.precision == KvPrecision::F16 && kv.blockSize == kBlockSlots &&
         shape.headDim % 16 == 0 && shape.headDim >= 16 &&
         shape.headDim <= 128 && tileRows == kAttentionMaxTileRows;
}

Status launchTensorCoreAttention(const AttentionParams &params,
                                 int64_t numItems, float *output,
                                 Stream stream) {
  return launch(params, numItems, output, stream);
}

Status launchTensorCoreAttention(const AttentionParams &params,
                                 int64_t numItems, uint16_t *output,
                                 Stream stream) {
  return launch(params, numItems, output, stream);
}

} // namespace spanc::cuda::detail
