//===- KvStorageTestUtils.h - A KV storage as the CUDA kernel tests use it ===//
//
// What the CUDA kernel tests (CudaKernelsTest on a device, CudaRelocationTest
// replaying the kernels on the host) share: a backend::KvStorage filled with
// random K/V, and the cuda::KvPoolView of its layout at another address.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_UNIT_KERNELS_KVSTORAGETESTUTILS_H
#define SPANC_TEST_UNIT_KERNELS_KVSTORAGETESTUTILS_H

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cuda/Types.h"

#include <random>

namespace spanc::backend {

/// Writes normal(0, 1) K and V into every slot of every block and layer.
void fillRandom(KvStorage &storage, std::mt19937 &rng);

/// The pool view of `storage`'s layout with its memory at `base` (its own
/// memory, or a device copy of it).
cuda::KvPoolView poolViewAt(KvStorage &storage, void *base);

} // namespace spanc::backend

#endif // SPANC_TEST_UNIT_KERNELS_KVSTORAGETESTUTILS_H
