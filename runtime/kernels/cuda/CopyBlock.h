//===- CopyBlock.h - Copy-on-write of one KV block on the device ----------===//
//
// backend::KvStorage::copyBlock on the device: every layer's K and V of one
// block into another (a decode slot's copy of a shared block before its
// first write). Two strided copies (K, then V), no kernel.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_COPYBLOCK_H
#define SPANC_RUNTIME_KERNELS_CUDA_COPYBLOCK_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// Copies block `source` into `destination` (both < pool.numBlocks,
/// checked), every layer, K and V: pool.blockStride elements per layer and
/// array (a block's heads lie together, as in KvStorage).
Status copyBlock(const KvPoolView &pool, int64_t source, int64_t destination,
                 Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_COPYBLOCK_H
