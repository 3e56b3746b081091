//===- CpuBackend.cpp - The CPU backend: the CPU pass over a KvStorage ----===//

#include "runtime/backend/CpuBackend.h"

namespace spanc::backend {

llvm::Expected<std::unique_ptr<CpuBackend>>
CpuBackend::create(model::Model &model, int64_t numBlocks, unsigned blockSize,
                   bool keysRotated, bool prefault) {
  KvStorageConfig config =
      kvStorageConfigFor(model, numBlocks, int(blockSize), keysRotated);
  config.prefault = prefault;
  auto storage = KvStorage::create(config);
  if (!storage)
    return storage.takeError();
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(model, std::move(*storage)));
}

CpuBackend::CpuBackend(model::Model &model, std::unique_ptr<KvStorage> storage)
    : cpuModel(model), kvStorage(std::move(storage)),
      relocation(*kvStorage, model.ropeConfig()), forwardPass(model) {}

StepLimits CpuBackend::stepLimits() const {
  return cpuStepLimits(cpuModel, *kvStorage);
}

uint32_t CpuBackend::numLayers() const { return cpuModel.config().numLayers; }

llvm::Error CpuBackend::runStep(const StepLayout &step,
                                model::ForwardOutput *output,
                                uint32_t numLayers) {
  return forwardPass.run(step, *kvStorage, output, numLayers);
}

void CpuBackend::tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                                llvm::ArrayRef<int32_t> b,
                                llvm::ArrayRef<int32_t> validTokens,
                                std::vector<float> &distances) {
  for (size_t index = 0; index < a.size(); ++index) {
    size_t first = distances.size();
    distances.resize(first + size_t(validTokens[index]));
    kvStorage->tokenDistances(int(layer), a[index], b[index],
                              validTokens[index], distances.data() + first);
  }
}

void CpuBackend::relocate(const kv::RelocationPlan &plan) {
  relocation.apply(plan);
}

void CpuBackend::copyBlock(const kv::RelocationOp &copy) {
  relocation.apply(llvm::ArrayRef<kv::RelocationOp>(copy));
}

} // namespace spanc::backend
