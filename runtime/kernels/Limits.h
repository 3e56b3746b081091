//===- Limits.h - The sizes the kernels' fixed arrays allow ---------------===//
//
// One home for the limits that fixed-size arrays impose: the CPU's stack
// arrays in attention and KV storage, and the CUDA attention kernel's shared
// memory (docs/ARCHITECTURE.md, "Limits"). They are checked where data
// enters — ModelConfig::fromGguf for a model's shape, KvStorage::create and
// Executor::create for the block size, CudaBackend's creation and the CUDA
// attention plan — so the kernels can rely on them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_LIMITS_H
#define SPANC_RUNTIME_KERNELS_LIMITS_H

#include <cstdint>

namespace spanc::kernels {

/// The largest head dimension (attention tiles and KV row buffers).
constexpr int kMaxHeadDim = 256;
/// The most tokens a KV block holds (per-block score and key buffers).
constexpr int kMaxBlockSize = 64;
/// The longest context a model may declare: positions are int32 and the
/// RoPE table is sized by it (2^20 positions of head dim 256 take 1 GiB).
constexpr int64_t kMaxContextLength = int64_t(1) << 20;

} // namespace spanc::kernels

#endif // SPANC_RUNTIME_KERNELS_LIMITS_H
