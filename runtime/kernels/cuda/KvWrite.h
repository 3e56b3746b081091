//===- KvWrite.h - Storing a step's K and V into the paged pool -----------===//
//
// backend::KvStorage::writeTokens on the device: each new token's K and V rows
// (f32, straight from the Q|K|V GEMM and RoPE) go to their slot of their
// block, rounded to the pool's precision (f16 round to nearest even, as
// the CPU rounds) and with K transposed into the dimension-major layout.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_KVWRITE_H
#define SPANC_RUNTIME_KERNELS_CUDA_KVWRITE_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// For t < count: token t's K ([numKvHeads][headDim] floats at keys + t *
/// rowStride) and V (at values + t * rowStride) go to slot slotIndices[t]
/// of block slotBlocks[t] of `layer`. slotBlocks and slotIndices are
/// device arrays (built once per step, shared by every layer).
Status writeKv(const KvPoolView &pool, int layer, int64_t count,
               const int32_t *slotBlocks, const int32_t *slotIndices,
               const float *keys, const float *values, int64_t rowStride,
               Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_KVWRITE_H
