//===- CpuBackend.h - The CPU backend: the CPU pass over a KvStorage ------===//
//
// The first Backend: the K/V memory is a KvStorage in host memory, the
// forward pass is CpuForwardPass (the CPU kernels, every numerics rule of
// docs/ARCHITECTURE.md, "Numerics"), and relocations and copies run through
// RelocationExecutor with the model's exact RoPE.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPUBACKEND_H
#define SPANC_RUNTIME_BACKEND_CPUBACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/backend/cpu/RelocationExecutor.h"
#include "runtime/model/Model.h"

#include <cstdint>
#include <memory>

namespace spanc::backend {

class CpuBackend final : public Backend {
public:
  /// Sizes the K/V storage for `model`: `numBlocks` blocks of `blockSize`
  /// tokens, K stored rotated (ReRoPE) or not (rope-in-kernel).
  /// `prefault`: KvStorageConfig::prefault.
  static llvm::Expected<std::unique_ptr<CpuBackend>>
  create(model::Model &model, int64_t numBlocks, unsigned blockSize,
         bool keysRotated, bool prefault = false);

  void tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                      llvm::ArrayRef<int32_t> b,
                      llvm::ArrayRef<int32_t> validTokens,
                      std::vector<float> &distances) override;
  void relocate(const kv::RelocationPlan &plan) override;
  void copyBlock(const kv::RelocationOp &copy) override;
  const KvStorage *hostStorage() const override { return kvStorage.get(); }

  /// The K/V memory (tests compare what relocation left there).
  const KvStorage &storage() const { return *kvStorage; }
  /// The forward pass (its per-op profile).
  CpuForwardPass &pass() { return forwardPass; }

private:
  CpuBackend(model::Model &model, std::unique_ptr<KvStorage> storage);
  StepLimits stepLimits() const override;
  uint32_t numLayers() const override;
  llvm::Error runStep(const StepLayout &step, model::ForwardOutput *output,
                      uint32_t numLayers) override;
  void enableOpTimers(bool enabled) override {
    forwardPass.enableProfile(enabled);
  }
  ForwardProfile opProfile() const override { return forwardPass.profile(); }
  void resetOpProfile() override { forwardPass.resetProfile(); }

  model::Model &cpuModel;
  std::unique_ptr<KvStorage> kvStorage;
  RelocationExecutor relocation;
  CpuForwardPass forwardPass;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPUBACKEND_H
