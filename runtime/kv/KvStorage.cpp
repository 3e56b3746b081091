//===- KvStorage.cpp - Physical K/V memory in fixed-size blocks -----------===//

#include "runtime/kv/KvStorage.h"

#include <sys/mman.h>

#include <cstring>

namespace spanc::kv {

KvStorage::KvStorage(const KvStorageConfig &config) : config_(config) {
  headStride_ = int64_t(config.headDim) * config.blockSize;
  blockStride_ = headStride_ * config.numKvHeads;
  layerStride_ = blockStride_ * config.numBlocks;
  sizeInBytes_ = layerStride_ * 2 * config.numLayers * int64_t(sizeof(float));
}

KvStorage::~KvStorage() {
  if (memory_)
    munmap(memory_, size_t(sizeInBytes_));
}

llvm::Expected<std::unique_ptr<KvStorage>>
KvStorage::create(const KvStorageConfig &config) {
  if (config.numLayers <= 0 || config.numKvHeads <= 0 || config.headDim <= 0 ||
      config.blockSize <= 0 || config.numBlocks <= 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "KV storage: layers (%d), KV heads (%d), head dim (%d), block size "
        "(%d) and blocks (%lld) must all be positive",
        config.numLayers, config.numKvHeads, config.headDim, config.blockSize,
        (long long)config.numBlocks);
  if (config.blockSize > 64)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "KV storage: block size %d exceeds 64",
                                   config.blockSize);
  std::unique_ptr<KvStorage> storage(new KvStorage(config));
  void *memory =
      mmap(nullptr, size_t(storage->sizeInBytes_), PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "KV storage: cannot map %lld bytes for %lld blocks",
        (long long)storage->sizeInBytes_, (long long)config.numBlocks);
  storage->memory_ = static_cast<float *>(memory);
  return storage;
}

void KvStorage::writeToken(int layer, int64_t block, int slot, const float *key,
                           const float *value) {
  const int headDim = config_.headDim;
  for (int head = 0; head < config_.numKvHeads; ++head) {
    float *keyBlock = keys(layer, block, head);
    const float *keyHead = key + head * headDim;
    for (int dim = 0; dim < headDim; ++dim)
      keyBlock[dim * config_.blockSize + slot] = keyHead[dim];
    std::memcpy(values(layer, block, head) + slot * headDim,
                value + head * headDim, sizeof(float) * size_t(headDim));
  }
}

void KvStorage::copyBlock(int64_t source, int64_t destination) {
  for (int layer = 0; layer < config_.numLayers; ++layer) {
    std::memcpy(keys(layer, destination, 0), keys(layer, source, 0),
                sizeof(float) * size_t(blockStride_));
    std::memcpy(values(layer, destination, 0), values(layer, source, 0),
                sizeof(float) * size_t(blockStride_));
  }
}

cpu::PagedKvView KvStorage::layerView(int layer) const {
  cpu::PagedKvView view;
  view.keys = memory_ + layerOffset(layer, false);
  view.values = memory_ + layerOffset(layer, true);
  view.blockStride = blockStride_;
  view.headStride = headStride_;
  view.blockSize = config_.blockSize;
  return view;
}

} // namespace spanc::kv
