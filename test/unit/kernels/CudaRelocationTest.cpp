//===- CudaRelocationTest.cpp - CUDA K/V writes and relocation, on the host
//===//
//
// What the K/V write and ReRoPE relocation kernels do to the pool, replayed
// on the host with their own code (KvMath.h offsets, relocateUnit over
// every unit of every (op, layer, head) item of a RelocationBatch) over a
// backend::KvStorage's memory, and compared with what the CPU does to an
// identical storage (writeTokens; cpu::relocateBlocksScalar through the
// layout backend::RelocationExecutor derives). The batch layout itself (tables
// per distinct delta, refused batches, the grid) is checked directly.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/backend/cpu/RelocationExecutor.h"
#include "runtime/kernels/cpu/Rerope.h"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/KvMath.h"
#include "runtime/kernels/cuda/RelocationBatch.h"
#include "runtime/kernels/cuda/RelocationMath.h"
#include "test/unit/kernels/KvStorageTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace spanc;

std::unique_ptr<backend::KvStorage> makeStorage(cpu::KvPrecision precision,
                                                int numLayers = 3) {
  backend::KvStorageConfig config;
  config.numLayers = numLayers;
  config.numKvHeads = 2;
  config.headDim = 64;
  config.blockSize = 16;
  config.numBlocks = 24;
  config.precision = precision;
  auto storage = backend::KvStorage::create(config);
  EXPECT_TRUE(bool(storage));
  return storage ? std::move(*storage) : nullptr;
}

/// The pool view the backend would hand the kernels for `storage`.
cuda::KvPoolView poolOf(backend::KvStorage &storage) {
  return backend::poolViewAt(storage, storage.keyData(0, 0, 0));
}

void fillRandom(backend::KvStorage &storage, uint32_t seed) {
  std::mt19937 rng(seed);
  backend::fillRandom(storage, rng);
}

bool sameBytes(backend::KvStorage &a, backend::KvStorage &b) {
  return std::memcmp(a.keyData(0, 0, 0), b.keyData(0, 0, 0),
                     size_t(a.sizeInBytes())) == 0;
}

TEST(CudaKvWrite, KernelIndexingStoresTokensAsWriteTokens) {
  for (cpu::KvPrecision precision :
       {cpu::KvPrecision::F16, cpu::KvPrecision::F32}) {
    auto cpuStorage = makeStorage(precision);
    auto gpuStorage = makeStorage(precision);
    const int kvWidth = 2 * 64;
    const int64_t rowStride = 3 * kvWidth; // K and V inside Q|K|V rows
    const std::vector<int32_t> blocks = {3, 3, 3, 9, 9, 17};
    const std::vector<int32_t> slots = {5, 6, 7, 0, 1, 15};
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> rows(blocks.size() * size_t(rowStride));
    for (float &x : rows)
      x = normal(rng);
    const float *keys = rows.data() + kvWidth, *values = keys + kvWidth;
    cpuStorage->writeTokens(1, int64_t(blocks.size()), blocks.data(),
                            slots.data(), keys, values, rowStride);
    // writeKvKernel's body for every (token, head, dim).
    const cuda::KvPoolView pool = poolOf(*gpuStorage);
    for (size_t token = 0; token < blocks.size(); ++token)
      for (int index = 0; index < kvWidth; ++index) {
        const int head = index / 64, dim = index % 64;
        const float key = keys[token * size_t(rowStride) + size_t(index)];
        const float value = values[token * size_t(rowStride) + size_t(index)];
        const int64_t k =
            pool.layerStride +
            cuda::keyOffset(pool.blockStride, pool.headStride, 16,
                            blocks[token], head, slots[token], dim);
        const int64_t v =
            pool.layerStride +
            cuda::valueOffset(pool.blockStride, pool.headStride, 64,
                              blocks[token], head, slots[token], dim);
        if (precision == cpu::KvPrecision::F16) {
          cuda::storeKv(static_cast<uint16_t *>(pool.keys) + k, key);
          cuda::storeKv(static_cast<uint16_t *>(pool.values) + v, value);
        } else {
          cuda::storeKv(static_cast<float *>(pool.keys) + k, key);
          cuda::storeKv(static_cast<float *>(pool.values) + v, value);
        }
      }
    EXPECT_TRUE(sameBytes(*cpuStorage, *gpuStorage));
  }
}

/// Every unit of every item of the batch, as the relocation launch runs
/// them (units of one item are independent; items of a batch too).
void replayRelocation(const cuda::KvPoolView &pool,
                      const cuda::RelocationRotation &rotation,
                      const cuda::RelocationBatch &batch) {
  const int64_t units =
      cuda::relocationUnits(pool.headDim, rotation.rotaryDim, pool.blockSize);
  for (const cuda::RelocationRecord &record : batch.records)
    for (int layer = 0; layer < pool.numLayers; ++layer)
      for (int head = 0; head < pool.numKvHeads; ++head)
        for (int64_t unit = 0; unit < units; ++unit) {
          if (pool.precision == cuda::KvPrecision::F16)
            cuda::relocateUnit<uint16_t>(
                pool, rotation.order, rotation.rotaryDim, record,
                batch.tables.data(), layer, head, unit);
          else
            cuda::relocateUnit<float>(pool, rotation.order, rotation.rotaryDim,
                                      record, batch.tables.data(), layer, head,
                                      unit);
        }
}

struct RelocationCase {
  cpu::KvPrecision precision;
  cpu::RopeOrder order;
  int rotaryDim;
};

class CudaRelocationReplay : public testing::TestWithParam<RelocationCase> {};

TEST_P(CudaRelocationReplay, TurnsAndCopiesBlocksAsTheCpuExecutor) {
  const RelocationCase param = GetParam();
  auto cpuStorage = makeStorage(param.precision);
  auto gpuStorage = makeStorage(param.precision);
  fillRandom(*cpuStorage, 77);
  fillRandom(*gpuStorage, 77);
  ASSERT_TRUE(sameBytes(*cpuStorage, *gpuStorage));
  cpu::RopeConfig rope;
  rope.headDim = 64;
  rope.rotaryDim = param.rotaryDim;
  rope.order = param.order;
  rope.theta = 10000.0f;
  // In place, duplicates with shared and distinct deltas, negative delta,
  // a delta-0 copy.
  const std::vector<cpu::RelocationOp> cpuOps = {
      {2, 2, 37}, {4, 10, 37}, {5, 11, -300}, {6, 12, 0}, {7, 7, 1000000}};
  backend::RelocationExecutor executor(*cpuStorage, rope);
  cpu::relocateBlocksScalar(executor.layout(), executor.rotation(),
                            std::vector<void *>{cpuStorage->keyData(0, 0, 0),
                                                cpuStorage->keyData(1, 0, 0),
                                                cpuStorage->keyData(2, 0, 0)}
                                .data(),
                            std::vector<void *>{cpuStorage->valueData(0, 0, 0),
                                                cpuStorage->valueData(1, 0, 0),
                                                cpuStorage->valueData(2, 0, 0)}
                                .data(),
                            cpuOps);

  const std::vector<double> frequencies = backend::relocationFrequencies(rope);
  cuda::RelocationRotation rotation;
  rotation.order = param.order == cpu::RopeOrder::NeoX
                       ? cuda::RopeOrder::NeoX
                       : cuda::RopeOrder::Normal;
  rotation.rotaryDim = rope.rotaryDim;
  rotation.frequencies = frequencies.data();
  std::vector<cuda::RelocationOp> ops;
  for (const cpu::RelocationOp &op : cpuOps)
    ops.push_back({op.source, op.destination, op.delta});
  const cuda::KvPoolView pool = poolOf(*gpuStorage);
  cuda::RelocationBatch batch;
  ASSERT_TRUE(
      cuda::buildRelocationBatch(pool, rotation, ops.data(), ops.size(), batch)
          .ok());
  EXPECT_EQ(batch.tables.size(), 3u * size_t(rope.rotaryDim)); // 3 deltas
  EXPECT_EQ(batch.records[3].table, -1);
  EXPECT_EQ(batch.records[0].table, batch.records[1].table);
  EXPECT_EQ(cuda::relocationGridSize(pool, ops.size()), 5 * 3 * 2);
  replayRelocation(pool, rotation, batch);
  EXPECT_TRUE(sameBytes(*cpuStorage, *gpuStorage));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaRelocationReplay,
    testing::Values(
        RelocationCase{cpu::KvPrecision::F16, cpu::RopeOrder::Normal, 64},
        RelocationCase{cpu::KvPrecision::F32, cpu::RopeOrder::Normal, 64},
        RelocationCase{cpu::KvPrecision::F16, cpu::RopeOrder::NeoX, 64},
        RelocationCase{cpu::KvPrecision::F16, cpu::RopeOrder::Normal, 32}));

TEST(CudaRelocationBatch, RefusesBatchesTheLaunchCannotRunConcurrently) {
  auto storage = makeStorage(cpu::KvPrecision::F16);
  const cuda::KvPoolView pool = poolOf(*storage);
  const std::vector<double> frequencies(32, 0.5);
  cuda::RelocationRotation rotation;
  rotation.rotaryDim = 64;
  rotation.frequencies = frequencies.data();
  cuda::RelocationBatch batch;
  auto build = [&](std::vector<cuda::RelocationOp> ops) {
    return cuda::buildRelocationBatch(pool, rotation, ops.data(), ops.size(),
                                      batch);
  };
  EXPECT_TRUE(build({}).ok());
  EXPECT_TRUE(batch.records.empty());
  EXPECT_FALSE(build({{1, 2, 5}, {3, 2, 5}}).ok()); // two writers
  EXPECT_FALSE(build({{1, 2, 5}, {2, 3, 5}}).ok()); // reads a written block
  EXPECT_FALSE(build({{1, 24, 5}}).ok());           // outside the pool
  rotation.rotaryDim = 66;
  const cuda::Status odd = build({{1, 2, 5}});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("rotary dim 66"), std::string::npos);
}

} // namespace
