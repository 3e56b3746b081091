//===- KvDistances.cu - How far two blocks' K/V rows lie apart ------------===//

#include "runtime/kernels/cuda/KvDistances.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/KvMath.h"

namespace spanc::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per (pair, slot): lanes stride over heads x dims, double sums,
// one shuffle tree.
template <typename Element>
__global__ void tokenDistancesKernel(KvPoolView pool, int64_t layerOffset,
                                     const int32_t *a, const int32_t *b,
                                     int64_t numPairs, float *out) {
  const int64_t task = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (task >= numPairs * pool.blockSize)
    return;
  const int lane = threadIdx.x % 32;
  const int64_t pair = task / pool.blockSize;
  const int slot = int(task % pool.blockSize);
  const Element *keys = static_cast<const Element *>(pool.keys) + layerOffset;
  const Element *values =
      static_cast<const Element *>(pool.values) + layerOffset;
  double sum = 0;
  for (int index = lane; index < pool.numKvHeads * pool.headDim; index += 32) {
    const int head = index / pool.headDim, dim = index % pool.headDim;
    const double dk =
        double(loadKv(keys + keyOffset(pool.blockStride, pool.headStride,
                                       pool.blockSize, a[pair], head, slot,
                                       dim))) -
        double(
            loadKv(keys + keyOffset(pool.blockStride, pool.headStride,
                                    pool.blockSize, b[pair], head, slot, dim)));
    const double dv =
        double(loadKv(values + valueOffset(pool.blockStride, pool.headStride,
                                           pool.headDim, a[pair], head, slot,
                                           dim))) -
        double(loadKv(values + valueOffset(pool.blockStride, pool.headStride,
                                           pool.headDim, b[pair], head, slot,
                                           dim)));
    sum += dk * dk + dv * dv;
  }
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0)
    out[task] = float(sum);
}

} // namespace

Status tokenDistances(const KvPoolView &pool, int layer, const int32_t *a,
                      const int32_t *b, int64_t numPairs, float *out,
                      Stream stream) {
  if (layer < 0 || layer >= pool.numLayers)
    return invalidArgument("tokenDistances",
                           "layer " + std::to_string(layer) + " of " +
                               std::to_string(pool.numLayers));
  const int64_t tasks = numPairs * pool.blockSize;
  if (tasks <= 0)
    return Status::success();
  const unsigned blocks =
      unsigned((tasks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int64_t layerOffset = int64_t(layer) * pool.layerStride;
  if (pool.precision == KvPrecision::F16)
    tokenDistancesKernel<uint16_t><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        pool, layerOffset, a, b, numPairs, out);
  else
    tokenDistancesKernel<float><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        pool, layerOffset, a, b, numPairs, out);
  return launchStatus("tokenDistancesKernel");
}

} // namespace spanc::cuda
