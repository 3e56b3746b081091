//===- KvStorageTestUtils.cpp - A KV storage as the CUDA kernel tests use it //

#include "test/unit/kernels/KvStorageTestUtils.h"

#include <vector>

namespace spanc::backend {

void fillRandom(KvStorage &storage, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const KvStorageConfig &config = storage.config();
  std::vector<float> key(size_t(config.numKvHeads * config.headDim)),
      value(key.size());
  for (int layer = 0; layer < config.numLayers; ++layer)
    for (int64_t block = 0; block < config.numBlocks; ++block)
      for (int slot = 0; slot < config.blockSize; ++slot) {
        for (float &x : key)
          x = normal(rng);
        for (float &x : value)
          x = normal(rng);
        storage.writeToken(layer, block, slot, key.data(), value.data());
      }
}

cuda::KvPoolView poolViewAt(KvStorage &storage, void *base) {
  const KvStorageConfig &config = storage.config();
  char *host = static_cast<char *>(storage.keyData(0, 0, 0));
  char *bytes = static_cast<char *>(base);
  cuda::KvPoolView pool;
  pool.keys = bytes;
  pool.values =
      bytes + (static_cast<char *>(storage.valueData(0, 0, 0)) - host);
  pool.numLayers = config.numLayers;
  pool.numKvHeads = config.numKvHeads;
  pool.headDim = config.headDim;
  pool.blockSize = config.blockSize;
  pool.numBlocks = config.numBlocks;
  // K and V of a layer are consecutive arrays in one mapping.
  pool.layerStride =
      config.numLayers > 1
          ? (static_cast<char *>(storage.keyData(1, 0, 0)) - host) /
                storage.elementBytes()
          : 0;
  pool.blockStride = storage.blockStride();
  pool.headStride = storage.headStride();
  pool.precision = storage.precision() == cpu::KvPrecision::F16
                       ? cuda::KvPrecision::F16
                       : cuda::KvPrecision::F32;
  return pool;
}

} // namespace spanc::backend
