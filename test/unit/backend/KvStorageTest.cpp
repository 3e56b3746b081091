//===- KvStorageTest.cpp - K/V writes land where attention reads them -----===//
//
// writeTokens transposes K into the dimension-major block layout 16 tokens
// at a time (AVX-512; AVX2 converts a row 8 lanes at a time, the scalar
// path element by element) and converts to the storage precision: every
// element must read back (key()/value()) as the written float rounded to
// that precision, at its own block and slot, for runs that start
// mid-block, end mid-block, change block, and skip slots; and no other slot
// may change.
// copyBlock copies every layer bit for bit.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include <random>
#include <vector>

namespace {

using namespace spanc;
using namespace spanc::backend;

class Storage : public ::testing::TestWithParam<cpu::KvPrecision> {};

float rounded(float value, cpu::KvPrecision precision) {
  return precision == cpu::KvPrecision::F16
             ? cpu::halfToFloat(cpu::floatToHalf(value))
             : value;
}

TEST_P(Storage, WriteTokensPutsEveryElementAtItsSlot) {
  const cpu::KvPrecision precision = GetParam();
  for (int headDim : {64, 40}) {
    for (int blockSize : {16, 8}) {
      SCOPED_TRACE("head dim " + std::to_string(headDim) + ", block size " +
                   std::to_string(blockSize));
      KvStorageConfig config;
      config.numLayers = 2;
      config.numKvHeads = 3;
      config.headDim = headDim;
      config.blockSize = blockSize;
      config.numBlocks = 12;
      config.precision = precision;
      auto created = KvStorage::create(config);
      ASSERT_TRUE(bool(created)) << llvm::toString(created.takeError());
      KvStorage &storage = **created;
      EXPECT_EQ(storage.sizeInBytes(), 2 * 2 * 12 * 3 * headDim * blockSize *
                                           cpu::kvElementBytes(precision));
      // Slots: block 4 from slot 3 to its end, all of block 9, the first 5
      // of block 1, then block 7 slots 2 and 6 (not consecutive), block 0
      // slot 0: 90 tokens with every kind of run boundary.
      std::vector<int32_t> blocks, slots;
      auto add = [&](int32_t block, int32_t first, int32_t end) {
        for (int32_t slot = first; slot < end; ++slot) {
          blocks.push_back(block);
          slots.push_back(slot);
        }
      };
      add(4, 3, blockSize);
      add(9, 0, blockSize);
      add(1, 0, 5);
      add(7, 2, 3);
      add(7, 6, 7);
      add(0, 0, 1);
      const int64_t count = int64_t(blocks.size());
      const int kvWidth = config.numKvHeads * headDim;
      const int64_t rowStride = 2 * kvWidth + 7; // K, V, then other columns
      std::vector<float> rows(size_t(count * rowStride));
      std::mt19937 random(42);
      std::normal_distribution<float> normal(0.0f, 2.0f);
      for (float &x : rows)
        x = normal(random);
      const int layer = 1;
      storage.writeTokens(layer, count, blocks.data(), slots.data(),
                          rows.data(), rows.data() + kvWidth, rowStride);
      std::vector<std::vector<bool>> written(
          12, std::vector<bool>(size_t(blockSize), false));
      for (int64_t token = 0; token < count; ++token) {
        written[size_t(blocks[token])][size_t(slots[token])] = true;
        for (int head = 0; head < config.numKvHeads; ++head)
          for (int dim = 0; dim < headDim; ++dim) {
            const float *row = rows.data() + token * rowStride;
            ASSERT_EQ(
                storage.key(layer, blocks[token], head, slots[token], dim),
                rounded(row[head * headDim + dim], precision))
                << "token " << token << " head " << head << " dim " << dim;
            ASSERT_EQ(
                storage.value(layer, blocks[token], head, slots[token], dim),
                rounded(row[kvWidth + head * headDim + dim], precision));
          }
      }
      // Everything else is still zero, in both layers.
      for (int checkLayer = 0; checkLayer < 2; ++checkLayer)
        for (int block = 0; block < 12; ++block)
          for (int slot = 0; slot < blockSize; ++slot) {
            if (checkLayer == layer && written[size_t(block)][size_t(slot)])
              continue;
            for (int head = 0; head < config.numKvHeads; ++head)
              for (int dim = 0; dim < headDim; ++dim) {
                ASSERT_EQ(storage.key(checkLayer, block, head, slot, dim), 0.0f)
                    << "layer " << checkLayer << " block " << block << " slot "
                    << slot;
                ASSERT_EQ(storage.value(checkLayer, block, head, slot, dim),
                          0.0f);
              }
          }

      // writeToken (one at a time) writes the same.
      auto single = KvStorage::create(config);
      ASSERT_TRUE(bool(single));
      for (int64_t token = 0; token < count; ++token)
        (*single)->writeToken(layer, blocks[token], slots[token],
                              rows.data() + token * rowStride,
                              rows.data() + token * rowStride + kvWidth);
      for (int64_t token = 0; token < count; ++token)
        for (int head = 0; head < config.numKvHeads; ++head)
          for (int dim = 0; dim < headDim; ++dim)
            ASSERT_EQ(
                (*single)->key(layer, blocks[token], head, slots[token], dim),
                storage.key(layer, blocks[token], head, slots[token], dim));

      // copyBlock: block 9 into 11, every layer, K and V.
      storage.copyBlock(9, 11);
      for (int slot = 0; slot < blockSize; ++slot)
        for (int head = 0; head < config.numKvHeads; ++head)
          for (int dim = 0; dim < headDim; ++dim) {
            ASSERT_EQ(storage.key(layer, 11, head, slot, dim),
                      storage.key(layer, 9, head, slot, dim));
            ASSERT_EQ(storage.value(layer, 11, head, slot, dim),
                      storage.value(layer, 9, head, slot, dim));
          }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothPrecisions, Storage,
                         ::testing::Values(cpu::KvPrecision::F32,
                                           cpu::KvPrecision::F16));

TEST(Storage, HalfPrecisionHalvesTheBytes) {
  KvStorageConfig config{30, 3, 64, 16, 100, true, cpu::KvPrecision::F16};
  auto half = KvStorage::create(config);
  config.precision = cpu::KvPrecision::F32;
  auto full = KvStorage::create(config);
  ASSERT_TRUE(bool(half) && bool(full));
  // SmolLM2: 30 layers x 3 KV heads x 64 dims x 2 (K, V) per token.
  EXPECT_EQ((*half)->sizeInBytes(), 100 * 16 * 30 * 3 * 64 * 2 * 2);
  EXPECT_EQ((*full)->sizeInBytes(), 2 * (*half)->sizeInBytes());
}

/// This process's resident bytes (/proc/self/statm), or -1.
int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = -1, resident = -1;
  if (!(statm >> pages >> resident))
    return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(Storage, PrefaultTakesThePoolAtCreationAndKeepsItZero) {
  // 64 MiB of f16 blocks: lazily mapped, it costs no RSS until written;
  // prefaulted, all of it is resident at once and still reads zero.
  KvStorageConfig config{8, 2, 64, 16, 1024, true, cpu::KvPrecision::F16};
  ASSERT_EQ(config.numBlocks * 16 * 8 * 2 * 64 * 2 * 2, int64_t(64) << 20);
  const int64_t before = residentBytes();
  ASSERT_GT(before, 0) << "no /proc/self/statm";
  auto lazy = KvStorage::create(config);
  ASSERT_TRUE(bool(lazy)) << llvm::toString(lazy.takeError());
  const int64_t afterLazy = residentBytes();
  EXPECT_LT(afterLazy - before, int64_t(8) << 20);
  config.prefault = true;
  auto eager = KvStorage::create(config);
  ASSERT_TRUE(bool(eager)) << llvm::toString(eager.takeError());
  EXPECT_GE(residentBytes() - afterLazy, int64_t(60) << 20);
  for (int64_t block : {int64_t(0), int64_t(511), int64_t(1023)})
    for (int slot : {0, 15})
      EXPECT_EQ((*eager)->key(7, block, 1, slot, 63), 0.0f);
}

TEST(Storage, BadShapesAreErrors) {
  KvStorageConfig config{2, 0, 64, 16, 10, true, cpu::KvPrecision::F16};
  auto storage = KvStorage::create(config);
  ASSERT_FALSE(bool(storage));
  EXPECT_NE(llvm::toString(storage.takeError()).find("must all be positive"),
            std::string::npos);
}

} // namespace
