//===- KvWrite.cu - Storing a step's K and V into the paged pool ----------===//

#include "runtime/kernels/cuda/KvWrite.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/KvMath.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

// One thread per (token, head, dim). Reads are coalesced along dim; K's
// writes are blockSize apart (the transposition), V's contiguous.
template <typename Element>
__global__ void writeKvKernel(KvPoolView pool, int64_t layerOffset,
                              int64_t count, const int32_t *slotBlocks,
                              const int32_t *slotIndices, const float *keys,
                              const float *values, int64_t rowStride) {
  Element *keyLayer = static_cast<Element *>(pool.keys) + layerOffset;
  Element *valueLayer = static_cast<Element *>(pool.values) + layerOffset;
  const int64_t rowWidth = int64_t(pool.numKvHeads) * pool.headDim;
  const int64_t total = count * rowWidth;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < total; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = index / rowWidth;
    const int head = int(index % rowWidth / pool.headDim);
    const int dim = int(index % pool.headDim);
    const int64_t block = slotBlocks[token];
    const int slot = slotIndices[token];
    const int64_t source = token * rowStride + index % rowWidth;
    storeKv(keyLayer + keyOffset(pool.blockStride, pool.headStride,
                                 pool.blockSize, block, head, slot, dim),
            keys[source]);
    storeKv(valueLayer + valueOffset(pool.blockStride, pool.headStride,
                                     pool.headDim, block, head, slot, dim),
            values[source]);
  }
}

} // namespace

Status writeKv(const KvPoolView &pool, int layer, int64_t count,
               const int32_t *slotBlocks, const int32_t *slotIndices,
               const float *keys, const float *values, int64_t rowStride,
               Stream stream) {
  if (layer < 0 || layer >= pool.numLayers)
    return invalidArgument("writeKv", "layer " + std::to_string(layer) +
                                          " of " +
                                          std::to_string(pool.numLayers));
  const LaunchShape launch =
      elementwiseLaunch(count * pool.numKvHeads * pool.headDim);
  if (launch.blocks == 0)
    return Status::success();
  const int64_t layerOffset = int64_t(layer) * pool.layerStride;
  if (pool.precision == KvPrecision::F16)
    writeKvKernel<uint16_t>
        <<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
            pool, layerOffset, count, slotBlocks, slotIndices, keys, values,
            rowStride);
  else
    writeKvKernel<float>
        <<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
            pool, layerOffset, count, slotBlocks, slotIndices, keys, values,
            rowStride);
  return launchStatus("writeKvKernel");
}

} // namespace spanc::cuda
