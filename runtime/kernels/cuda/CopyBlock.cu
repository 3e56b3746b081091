//===- CopyBlock.cu - Copy-on-write of one KV block on the device ---------===//

#include "runtime/kernels/cuda/CopyBlock.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"

namespace spanc::cuda {

Status copyBlock(const KvPoolView &pool, int64_t source, int64_t destination,
                 Stream stream) {
  if (source < 0 || source >= pool.numBlocks || destination < 0 ||
      destination >= pool.numBlocks)
    return invalidArgument(
        "copyBlock", "block " + std::to_string(source) + " -> " +
                         std::to_string(destination) + " outside a pool of " +
                         std::to_string(pool.numBlocks));
  if (source == destination || pool.numLayers == 0)
    return Status::success();
  // One block of one layer is contiguous (all heads); the layers are
  // layerStride apart: one 2D copy per array.
  const size_t elementBytes = size_t(kvElementBytes(pool.precision));
  const size_t width = size_t(pool.blockStride) * elementBytes;
  // One layer needs no stride (and may have none); cudaMemcpy2D wants a
  // pitch of at least the width.
  const size_t pitch =
      pool.numLayers == 1 ? width : size_t(pool.layerStride) * elementBytes;
  if (pitch < width)
    return invalidArgument("copyBlock", "layer stride below a block");
  for (void *base : {pool.keys, pool.values}) {
    char *bytes = static_cast<char *>(base);
    SPANC_CUDA_CALL(cudaMemcpy2DAsync(bytes + size_t(destination) * width,
                                      pitch, bytes + size_t(source) * width,
                                      pitch, width, size_t(pool.numLayers),
                                      cudaMemcpyDeviceToDevice, stream));
  }
  return Status::success();
}

} // namespace spanc::cuda
