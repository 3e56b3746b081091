//===- KvDistances.h - How far two blocks' K/V rows lie apart -------------===//
//
// backend::KvStorage::tokenDistances on the device, for a blend's selection
// pass (Backend::tokenDistances): per slot of two blocks of one layer, the
// squared distance of their K and V rows over every KV head, summed in
// double as the CPU sums.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_KVDISTANCES_H
#define SPANC_RUNTIME_KERNELS_CUDA_KVDISTANCES_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// out[i * pool.blockSize + slot] = sum over heads and dims of (K_a - K_b)^2
/// + (V_a - V_b)^2 at `layer`, for blocks a[i], b[i] (device arrays) and
/// every slot of the block (the caller keeps the valid ones).
Status tokenDistances(const KvPoolView &pool, int layer, const int32_t *a,
                      const int32_t *b, int64_t numPairs, float *out,
                      Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_KVDISTANCES_H
