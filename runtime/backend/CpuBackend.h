//===- CpuBackend.h - The CPU backend: Model::forward over KvStorage ------===//
//
// The first Backend: the K/V memory is a kv::KvStorage in host memory, the
// forward pass is model::Model::forward (the CPU kernels, every numerics
// rule of docs/ARCHITECTURE.md, "Numerics"), and relocations and copies run
// through kv::RelocationExecutor with the model's exact RoPE.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPUBACKEND_H
#define SPANC_RUNTIME_BACKEND_CPUBACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/kv/KvStorage.h"
#include "runtime/kv/RelocationExecutor.h"
#include "runtime/model/Model.h"

#include <cstdint>
#include <memory>

namespace spanc::backend {

class CpuBackend final : public Backend {
public:
  /// Sizes the K/V storage for `model`: `numBlocks` blocks of `blockSize`
  /// tokens, K stored rotated (ReRoPE) or not (rope-in-kernel).
  static llvm::Expected<std::unique_ptr<CpuBackend>> create(model::Model &model,
                                                            int64_t numBlocks,
                                                            unsigned blockSize,
                                                            bool keysRotated);

  llvm::Error forward(llvm::ArrayRef<model::ForwardSequence> batch,
                      model::ForwardOutput &output) override;
  llvm::Error forwardLayers(llvm::ArrayRef<model::ForwardSequence> batch,
                            uint32_t numLayers) override;
  void tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                      llvm::ArrayRef<int32_t> b,
                      llvm::ArrayRef<int32_t> validTokens,
                      std::vector<float> &distances) override;
  void relocate(const kv::RelocationPlan &plan) override;
  void copyBlock(const kv::RelocationOp &copy) override;
  const kv::KvStorage *hostStorage() const override { return kvStorage.get(); }

  /// The K/V memory (tests compare what relocation left there).
  const kv::KvStorage &storage() const { return *kvStorage; }

private:
  CpuBackend(model::Model &model, std::unique_ptr<kv::KvStorage> storage);

  model::Model &cpuModel;
  std::unique_ptr<kv::KvStorage> kvStorage;
  kv::RelocationExecutor relocation;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPUBACKEND_H
