//===- KvMath.h - Where a K or V element lies in the paged pool -----------===//
//
// backend::KvStorage's layout as SPANC_HOST_DEVICE offsets, the one place the
// write, attention and relocation kernels (and their host tests) take it
// from: K of (block, head) dimension-major, V slot-major.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_KVMATH_H
#define SPANC_RUNTIME_KERNELS_CUDA_KVMATH_H

#include "runtime/kernels/cuda/HostDevice.h"

#include <cstdint>

namespace spanc::cuda {

/// Element offset of K (slot, dim) of (block, head) inside one layer.
SPANC_HOST_DEVICE int64_t keyOffset(int64_t blockStride, int64_t headStride,
                                    int blockSize, int64_t block, int head,
                                    int slot, int dim) {
  return block * blockStride + head * headStride + int64_t(dim) * blockSize +
         slot;
}

/// Element offset of V (slot, dim) of (block, head) inside one layer.
SPANC_HOST_DEVICE int64_t valueOffset(int64_t blockStride, int64_t headStride,
                                      int headDim, int64_t block, int head,
                                      int slot, int dim) {
  return block * blockStride + head * headStride + int64_t(slot) * headDim +
         dim;
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_KVMATH_H
