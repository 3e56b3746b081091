//===- RelocationExecutor.h - Applies relocation plans to KvStorage -------===//
//
// The glue between CIDRA plans (RelocationPlanner), the ReRoPE kernel and the
// physical KV memory: it derives the kernel's block layout from KvStorage and
// the exact per-pair RoPE frequencies from the model's RopeConfig (in double,
// YaRN and frequency factors included, never the attention factor: a
// relocation only turns K, it must not scale it again).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPU_RELOCATIONEXECUTOR_H
#define SPANC_RUNTIME_BACKEND_CPU_RELOCATIONEXECUTOR_H

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/Rerope.h"
#include "runtime/kernels/cpu/Rope.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/kv/RelocationPlanner.h"

#include <vector>

namespace spanc::backend {

/// f_i such that the angle cpu::ropeAngles uses for pair i at position p is
/// p * f_i (RoPE angles are linear in the position under every scaling).
std::vector<double> relocationFrequencies(const cpu::RopeConfig &config);

class RelocationExecutor {
public:
  RelocationExecutor(KvStorage &storage, const cpu::RopeConfig &config);

  /// Runs every batch of `plan`, in order.
  void apply(const kv::RelocationPlan &plan);
  /// Runs one batch (independent ops).
  void apply(llvm::ArrayRef<kv::RelocationOp> batch);
  /// Makes the copy a decode slot asks for, if any.
  void prepare(const kv::DecodeSlot &slot);

  const cpu::KvBlockLayout &layout() const { return layout_; }
  const cpu::RopeRotation &rotation() const { return rotation_; }

private:
  cpu::KvBlockLayout layout_;
  std::vector<double> frequencies_;
  cpu::RopeRotation rotation_;
  std::vector<cpu::RelocationOp> ops_; ///< one batch in the kernel's form
  std::vector<void *> keyLayers_, valueLayers_;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPU_RELOCATIONEXECUTOR_H
