//===- Limits.h - The sizes the kernels' fixed arrays allow ---------------===//
//
// One home for the limits that fixed-size stack arrays in attention and KV
// storage impose (docs/ARCHITECTURE.md, "Limits"). They are checked where
// data enters — ModelConfig::fromGguf for a model's shape, KvStorage::create
// and Executor::create for the block size — so the kernels can rely on them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_LIMITS_H
#define SPANC_RUNTIME_KERNELS_CPU_LIMITS_H

#include <cstdint>

namespace spanc::cpu {

/// The largest head dimension (attention tiles and KV row buffers).
constexpr int kMaxHeadDim = 256;
/// The most tokens a KV block holds (per-block score and key buffers).
constexpr int kMaxBlockSize = 64;
/// The longest context a model may declare: positions are int32 and the
/// RoPE table is sized by it (2^20 positions of head dim 256 take 1 GiB).
constexpr int64_t kMaxContextLength = int64_t(1) << 20;

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_LIMITS_H
