//===- AttentionMassTest.cpp - The attention each key receives ------------===//

#include "runtime/model/AttentionMass.h"

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
  model::KeyMassShape shape{kQueryHeads, 1, kHeadDim, 0.5f,
                            kQueryHeads * kHeadDim};
  std::vector<float> mass(length, 1.0f), scratch, transposed;
  model::accumulateKeyMass(shape, queries.data(), numQueries, cache.blockIds,
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
  model::KeyMassShape shape{kQueryHeads, 1, kHeadDim, 0.5f,
                            kQueryHeads * kHeadDim};
  std::vector<float> inKernel(7, 0.0f), stored(7, 0.0f), scratch, transposed;
  model::accumulateKeyMass(shape, queries.data(), 3, unrotated.blockIds,
                           unrotated.valid, unrotated.view(), &table,
                           inKernel.data(), scratch, transposed);
  model::accumulateKeyMass(shape, queries.data(), 3, rotated.blockIds,
                           rotated.valid, rotated.view(), nullptr,
                           stored.data(), scratch, transposed);
  for (int key = 0; key < 7; ++key)
    EXPECT_NEAR(inKernel[key], stored[key], 1e-5) << key;
  // Rotation matters: without it the masses differ.
  std::vector<float> plain(7, 0.0f);
  model::accumulateKeyMass(shape, queries.data(), 3, unrotated.blockIds,
                           unrotated.valid, unrotated.view(), nullptr,
                           plain.data(), scratch, transposed);
  double difference = 0;
  for (int key = 0; key < 7; ++key)
    difference += std::fabs(plain[key] - inKernel[key]);
  EXPECT_GT(difference, 1e-3);
}

} // namespace
