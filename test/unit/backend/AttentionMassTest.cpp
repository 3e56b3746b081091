//===- AttentionMassTest.cpp - The attention each key receives ------------===//

#include "runtime/backend/cpu/AttentionMass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace spanc;

namespace {

constexpr int kBlockSize = 4, kHeadDim = 4, kQueryHeads = 2;

/// Two blocks of one KV head, f32, dimension-major K as KvStorage keeps it.
struct Cache {
  std::vector<float> keys, values;
  std::vector<int32_t> blockIds = {1, 0}, valid = {3, 4};
  std::vector<std::vector<float>> logicalKeys; // [logical][dim]

  explicit Cache(std::mt19937 &random) {
    std::normal_distribution<float> normal;
    keys.assign(2 * kBlockSize * kHeadDim, 0);
    values = keys;
    for (size_t page = 0; page < blockIds.size(); ++page)
      for (int slot = 0; slot < valid[page]; ++slot) {
        std::vector<float> key(kHeadDim);
        for (int d = 0; d < kHeadDim; ++d) {
          key[d] = normal(random);
          keys[blockIds[page] * kBlockSize * kHeadDim + d * kBlockSize + slot] =
              key[d];
        }
        logicalKeys.push_back(key);
      }
  }
  cpu::PagedKvView view() const {
    cpu::PagedKvView kv;
    kv.keys = keys.data();
    kv.values = values.data();
    kv.precision = cpu::KvPrecision::F32;
    kv.blockStride = kBlockSize * kHeadDim;
    kv.headStride = kBlockSize * kHeadDim;
    kv.blockSize = kBlockSize;
    return kv;
  }
};

TEST(AttentionMass, IsTheCausalSoftmaxSummedOverRowsAndHeads) {
  std::mt19937 random(7);
  Cache cache(random);
  const int numQueries = 2, length = 7;
  std::normal_distribution<float> normal;
  std::vector<float> queries(numQueries * kQueryHeads * kHeadDim);
  for (float &q : queries)
    q = normal(random);
  backend::KeyMassShape shape{kQueryHeads, 1, kHeadDim, 0.5f,
                              kQueryHeads * kHeadDim};
  std::vector<float> mass(length, 1.0f), scratch, transposed;
  backend::accumulateKeyMass(shape, queries.data(), numQueries, cache.blockIds,
                             cache.valid, cache.view(), nullptr, mass.data(),
                             scratch, transposed);
  // The reference, in double: row r is logical token 5 + r.
  std::vector<double> expected(length, 1.0);
  for (int row = 0; row < numQueries; ++row)
    for (int head = 0; head < kQueryHeads; ++head) {
      const int seen = length - numQueries + row + 1;
      std::vector<double> scores(seen);
      double sum = 0;
      for (int key = 0; key < seen; ++key) {
        double dot = 0;
        for (int d = 0; d < kHeadDim; ++d)
          dot += double(queries[(row * kQueryHeads + head) * kHeadDim + d]) *
                 cache.logicalKeys[key][d];
        scores[key] = std::exp(0.5 * dot);
        sum += scores[key];
      }
      for (int key = 0; key < seen; ++key)
        expected[key] += scores[key] / sum;
    }
  double total = 0;
  for (int key = 0; key < length; ++key) {
    EXPECT_NEAR(mass[key], expected[key], 1e-5) << key;
    total += mass[key] - 1.0;
  }
  // Every row and head gives away exactly one unit of attention.
  EXPECT_NEAR(total, numQueries * kQueryHeads, 1e-5);
  // The last key is seen by the last row only.
  EXPECT_LT(mass[length - 1] - 1.0f, float(kQueryHeads) + 1e-6f);
}

TEST(AttentionMass, RotatesUnrotatedKeysAtTheirLogicalIndex) {
  std::mt19937 random(11);
  Cache unrotated(random);
  cpu::RopeConfig config;
  config.headDim = kHeadDim;
  config.rotaryDim = kHeadDim;
  cpu::RopeTable table(config, 64);
  // The same keys stored rotated at their logical index.
  Cache rotated = unrotated;
  int logical = 0;
  for (size_t page = 0; page < rotated.blockIds.size(); ++page)
    for (int slot = 0; slot < rotated.valid[page]; ++slot, ++logical)
      cpu::rotateHead(config.order, config.rotaryDim, table.row(logical),
                      rotated.keys.data() +
                          rotated.blockIds[page] * kBlockSize * kHeadDim + slot,
                      kBlockSize);
  std::normal_distribution<float> normal;
  std::vector<float> queries(3 * kQueryHeads * kHeadDim);
  for (float &q : queries)
    q = normal(random);
  backend::KeyMassShape shape{kQueryHeads, 1, kHeadDim, 0.5f,
                              kQueryHeads * kHeadDim};
  std::vector<float> inKernel(7, 0.0f), stored(7, 0.0f), scratch, transposed;
  backend::accumulateKeyMass(shape, queries.data(), 3, unrotated.blockIds,
                             unrotated.valid, unrotated.view(), &table,
                             inKernel.data(), scratch, transposed);
  backend::accumulateKeyMass(shape, queries.data(), 3, rotated.blockIds,
                             rotated.valid, rotated.view(), nullptr,
                             stored.data(), scratch, transposed);
  for (int key = 0; key < 7; ++key)
    EXPECT_NEAR(inKernel[key], stored[key], 1e-5) << key;
  // Rotation matters: without it the masses differ.
  std::vector<float> plain(7, 0.0f);
  backend::accumulateKeyMass(shape, queries.data(), 3, unrotated.blockIds,
                             unrotated.valid, unrotated.view(), nullptr,
                             plain.data(), scratch, transposed);
  double difference = 0;
  for (int key = 0; key < 7; ++key)
    difference += std::fabs(plain[key] - inKernel[key]);
  EXPECT_GT(difference, 1e-3);
}

/// The measure one key at a time, in the order its definition reads: a
/// dot's terms by dimension, a row's exp sum by key, a key's mass by row.
std::vector<float> keyAtATime(const backend::KeyMassShape &shape,
                              const std::vector<float> &queries,
                              int64_t numQueries,
                              const std::vector<std::vector<float>> &keys) {
  const int64_t length = int64_t(keys.size()) / shape.numKvHeads;
  const int group = shape.numQueryHeads / shape.numKvHeads;
  const int64_t firstQuery = length - numQueries;
  std::vector<std::vector<float>> rows;
  for (int64_t row = 0; row < numQueries; ++row)
    for (int head = 0; head < shape.numQueryHeads; ++head) {
      const int64_t seen = firstQuery + row + 1;
      std::vector<float> p(size_t(length), 0.0f);
      float maximum = -INFINITY;
      for (int64_t key = 0; key < seen; ++key) {
        const std::vector<float> &k =
            keys[size_t(key * shape.numKvHeads + head / group)];
        float dot = 0;
        for (int d = 0; d < shape.headDim; ++d)
          dot += queries[size_t(row * shape.queryRowStride +
                                head * shape.headDim + d)] *
                 k[size_t(d)];
        p[size_t(key)] = dot * shape.scale;
        maximum = std::max(maximum, p[size_t(key)]);
      }
      double sum = 0;
      for (int64_t key = 0; key < seen; ++key) {
        p[size_t(key)] = std::exp(p[size_t(key)] - maximum);
        sum += p[size_t(key)];
      }
      for (int64_t key = 0; key < seen; ++key)
        p[size_t(key)] *= float(1.0 / sum);
      rows.push_back(std::move(p));
    }
  std::vector<float> mass(size_t(length), 0.0f);
  for (int64_t key = 0; key < length; ++key)
    for (const std::vector<float> &p : rows)
      mass[size_t(key)] += p[size_t(key)];
  return mass;
}

// The kernel walks pages, threads and vectors over rows; none of that may
// change a bit, or a repair's choice would depend on the thread count.
TEST(AttentionMass, EqualsTheKeyAtATimeOrderBitForBit) {
  constexpr int kSlots = 16, kDim = 64, kKvHeads = 3, kHeads = 9;
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  // 40 pages, some partial, in a scrambled block order: 16 rows x 9 heads
  // over ~580 keys takes the threaded path.
  std::vector<int32_t> blockIds, valid;
  for (int page = 0; page < 40; ++page) {
    blockIds.push_back((page * 17 + 3) % 40);
    valid.push_back(page % 7 == 3 ? 5 : kSlots);
  }
  std::vector<float> storage(size_t(40) * kKvHeads * kDim * kSlots);
  std::vector<std::vector<float>> logicalKeys; // [key * kKvHeads + head]
  for (size_t page = 0; page < blockIds.size(); ++page)
    for (int slot = 0; slot < valid[page]; ++slot)
      for (int head = 0; head < kKvHeads; ++head) {
        std::vector<float> key(kDim);
        for (int d = 0; d < kDim; ++d) {
          key[size_t(d)] = normal(random);
          storage[size_t(((blockIds[page] * kKvHeads + head) * kDim + d) *
                             kSlots +
                         slot)] = key[size_t(d)];
        }
        logicalKeys.push_back(std::move(key));
      }
  cpu::PagedKvView kv;
  kv.keys = storage.data();
  kv.values = storage.data();
  kv.precision = cpu::KvPrecision::F32;
  kv.blockStride = kKvHeads * kDim * kSlots;
  kv.headStride = kDim * kSlots;
  kv.blockSize = kSlots;
  const int64_t numQueries = 16;
  std::vector<float> queries(size_t(numQueries) * kHeads * kDim);
  for (float &q : queries)
    q = normal(random);
  backend::KeyMassShape shape{kHeads, kKvHeads, kDim, 0.125f, kHeads * kDim};
  std::vector<float> expected =
      keyAtATime(shape, queries, numQueries, logicalKeys);
  std::vector<float> mass(expected.size(), 0.0f), scratch, transposed;
  backend::accumulateKeyMass(shape, queries.data(), numQueries, blockIds, valid,
                             kv, nullptr, mass.data(), scratch, transposed);
  for (size_t key = 0; key < mass.size(); ++key)
    ASSERT_EQ(mass[key], expected[key]) << key;
}

} // namespace
