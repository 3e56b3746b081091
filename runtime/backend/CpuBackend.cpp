//===- CpuBackend.cpp - The CPU backend: Model::forward over KvStorage ----===//

#include "runtime/backend/CpuBackend.h"

namespace spanc::backend {

llvm::Expected<std::unique_ptr<CpuBackend>>
CpuBackend::create(model::Model &model, int64_t numBlocks, unsigned blockSize,
                   bool keysRotated) {
  auto storage = kv::KvStorage::create(
      model.kvStorageConfig(numBlocks, int(blockSize), keysRotated));
  if (!storage)
    return storage.takeError();
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(model, std::move(*storage)));
}

CpuBackend::CpuBackend(model::Model &model,
                       std::unique_ptr<kv::KvStorage> storage)
    : cpuModel(model), kvStorage(std::move(storage)),
      relocation(*kvStorage, model.ropeConfig()) {}

llvm::Error CpuBackend::forward(llvm::ArrayRef<model::ForwardSequence> batch,
                                model::ForwardOutput &output) {
  return cpuModel.forward(batch, *kvStorage, output);
}

llvm::Error
CpuBackend::forwardLayers(llvm::ArrayRef<model::ForwardSequence> batch,
                          uint32_t numLayers) {
  return cpuModel.forwardLayers(batch, *kvStorage, numLayers);
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
