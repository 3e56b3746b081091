//===- HalfAccumulatingAttentionTest.cpp - llama.cpp-numerics attention ---===//
//
// The f16-accumulating kernel against exact softmax attention (to f16
// accuracy: halfAccumulationBound, derived from its roundings), its scalar
// path against its vector path (bit for bit, so one bound holds on every
// path), and causality over page lists with padding slots.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "test/unit/kernels/ErrorBounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using namespace spanc;
using namespace spanc::cpu;
using namespace spanc::test;

/// f16's smallest subnormal over two: the absolute error floor of rounding
/// a value below 2^-14 to f16.
constexpr double kHalfSubnormalError = 0x1p-25;

/// The error bound of one output element of the f16-accumulating kernel
/// for one query row, from its roundings (HalfAccumulatingAttention.h):
///  - scores: the query rounded to f16 moves q.k by at most 2^-11
///    sum_d |q_d k_d| (worst case: the roundings share one query), the f32
///    dot adds f32SumError(headDim) of the same, the scale one u of the
///    score, and expf one ulp (2u) of each weight. A score error dS_j moves
///    the output by sum_j p_j dS_j |v_j - out| to first order (the running
///    sum takes the same weights).
///  - the f16 accumulator: every key's fused multiply-add and every new
///    maximum's rescale round to f32 and then to f16, (2^-11 + u) of the
///    accumulator (or 2^-25 below f16's normal range), scaled to the final
///    maximum and divided by the sum; these roundings are held
///    probabilistically, lambda sqrt(sum of their squares), replaying the
///    kernel's online softmax in double to know each one's magnitude.
///  - the f32 running sum: f32SumError(keys) of the output; 1 / sum and the
///    product: 2u.
/// Second-order terms: a factor of two, as AttentionTest.cpp.
struct HalfAccumulationBound {
  std::vector<double> scores;      ///< scaled q.k, in key order
  std::vector<double> scoreErrors; ///< each score's bound
  double headDim = 0;

  double operator()(const std::vector<double> &values, double expected) const {
    const size_t keys = scores.size();
    double maximum = -1e300;
    for (double score : scores)
      maximum = std::max(maximum, score);
    double total = 0;
    for (double score : scores)
      total += std::exp(score - maximum);
    double withinScores = 0;
    for (size_t key = 0; key < keys; ++key)
      withinScores += std::exp(scores[key] - maximum) / total *
                      (scoreErrors[key] + 2 * kUnitRoundoff) *
                      std::abs(values[key] - expected);
    // The accumulator in units of the final maximum (A) and in the
    // kernel's own (A times exp(final - running maximum)).
    double accumulator = 0, running = -1e300, squares = 0;
    auto rounding = [&](double scaled) {
      const double own = std::abs(scaled) * std::exp(maximum - running);
      const double error =
          std::max((kHalfRoundoff + kUnitRoundoff) * own, kHalfSubnormalError);
      return error * std::exp(running - maximum);
    };
    for (size_t key = 0; key < keys; ++key) {
      if (scores[key] > running) {
        // A new maximum: the accumulator is rescaled to it and rounded.
        running = scores[key];
        const double error = key > 0 ? rounding(accumulator) : 0.0;
        squares += error * error;
      }
      accumulator += values[key] * std::exp(scores[key] - maximum);
      const double error = rounding(accumulator);
      squares += error * error;
    }
    const double accumulation = kLambda * std::sqrt(squares) / total;
    const double sums =
        (f32SumError(int64_t(keys)) + 2 * kUnitRoundoff) * std::abs(expected);
    return 2 * (withinScores + accumulation + sums);
  }
};

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 64;
constexpr int64_t kQueryDim = kHeads * kHeadDim, kKvDim = kKvHeads * kHeadDim;

struct Fixture {
  std::unique_ptr<backend::KvStorage> storage;
  std::vector<float> keys, values; ///< [token][kvDim], f16-rounded
  std::vector<int32_t> blockIds, validTokens;
};

/// `length` tokens of random f16 K/V written into pages of 16 whose valid
/// counts are `valid` (a partial page in the middle leaves padding).
Fixture makeFixture(const std::vector<int32_t> &valid, unsigned seed) {
  Fixture fixture;
  backend::KvStorageConfig config;
  config.numLayers = 1;
  config.numKvHeads = kKvHeads;
  config.headDim = kHeadDim;
  config.blockSize = 16;
  config.numBlocks = int64_t(valid.size()) + 2;
  auto storage = backend::KvStorage::create(config);
  EXPECT_TRUE(bool(storage));
  fixture.storage = std::move(*storage);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t page = 0; page < valid.size(); ++page) {
    // Blocks out of order, as a page list may be.
    int32_t block = int32_t(valid.size() - page);
    fixture.blockIds.push_back(block);
    fixture.validTokens.push_back(valid[page]);
    for (int slot = 0; slot < valid[page]; ++slot) {
      std::vector<float> key(kKvDim), value(kKvDim);
      for (int64_t d = 0; d < kKvDim; ++d) {
        key[size_t(d)] = roundToHalf(normal(rng) * 2.0f);
        value[size_t(d)] = roundToHalf(normal(rng));
      }
      fixture.storage->writeToken(0, block, slot, key.data(), value.data());
      fixture.keys.insert(fixture.keys.end(), key.begin(), key.end());
      fixture.values.insert(fixture.values.end(), value.begin(), value.end());
    }
  }
  return fixture;
}

std::vector<float> run(const Fixture &fixture,
                       const std::vector<float> &queries, int numQueries,
                       bool forceScalar) {
  PagedAttentionShape shape;
  shape.numQueryHeads = kHeads;
  shape.numKvHeads = kKvHeads;
  shape.headDim = kHeadDim;
  shape.scale = 0.125f;
  shape.queryRowStride = kQueryDim;
  shape.outputRowStride = kQueryDim;
  int32_t queryOffsets[] = {0, numQueries};
  int32_t pageOffsets[] = {0, int32_t(fixture.blockIds.size())};
  PagedAttentionBatch batch;
  batch.numSequences = 1;
  batch.queryOffsets = queryOffsets;
  batch.pageOffsets = pageOffsets;
  batch.blockIds = fixture.blockIds.data();
  batch.validTokens = fixture.validTokens.data();
  std::vector<float> output(size_t(numQueries * kQueryDim), -1.0f);
  halfAccumulatingAttention(shape, batch, fixture.storage->layerView(0),
                            queries.data(), output.data(), forceScalar);
  return output;
}

std::vector<float> randomQueries(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> queries(size_t(count * kQueryDim));
  for (float &value : queries)
    value = normal(rng);
  return queries;
}

TEST(HalfAccumulatingAttention, MatchesExactSoftmaxToHalfPrecision) {
  Fixture fixture = makeFixture({16, 5, 16, 9}, 1);
  const int64_t length = 16 + 5 + 16 + 9;
  const int numQueries = 7;
  std::vector<float> queries = randomQueries(numQueries, 2);
  std::vector<float> output = run(fixture, queries, numQueries, false);
  double largestRatio = 0;
  for (int row = 0; row < numQueries; ++row)
    for (int head = 0; head < kHeads; ++head) {
      const int kvHead = head / (kHeads / kKvHeads);
      const int64_t lastKey = length - numQueries + row;
      std::vector<double> scores;
      HalfAccumulationBound bound;
      double maximum = -1e300;
      for (int64_t key = 0; key <= lastKey; ++key) {
        double dot = 0, absoluteDot = 0;
        for (int d = 0; d < kHeadDim; ++d) {
          const double term =
              double(queries[size_t(row * kQueryDim + head * kHeadDim + d)]) *
              fixture.keys[size_t(key * kKvDim + kvHead * kHeadDim + d)];
          dot += term;
          absoluteDot += std::abs(term);
        }
        scores.push_back(dot * 0.125);
        bound.scores.push_back(dot * 0.125);
        bound.scoreErrors.push_back((kHalfRoundoff + f32SumError(kHeadDim)) *
                                        absoluteDot * 0.125 +
                                    kUnitRoundoff * std::abs(dot * 0.125));
        maximum = std::max(maximum, scores.back());
      }
      double total = 0;
      for (double &score : scores)
        total += (score = std::exp(score - maximum));
      for (int d = 0; d < kHeadDim; ++d) {
        double expected = 0;
        std::vector<double> values;
        for (int64_t key = 0; key <= lastKey; ++key) {
          values.push_back(
              fixture.values[size_t(key * kKvDim + kvHead * kHeadDim + d)]);
          expected += scores[size_t(key)] / total * values.back();
        }
        const double allowed = bound(values, expected);
        const double error = std::abs(
            output[size_t(row * kQueryDim + head * kHeadDim + d)] - expected);
        largestRatio = std::max(largestRatio, error / allowed);
        EXPECT_LE(error, allowed)
            << "row " << row << " head " << head << " dim " << d;
      }
    }
  std::printf("%s path: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()), largestRatio);
}

TEST(HalfAccumulatingAttention, ScalarAndVectorPathsAgreeBitForBit) {
  if (!hasHalfAccumulatingAttention())
    GTEST_SKIP() << "no AVX-512";
  Fixture fixture = makeFixture({16, 16, 3, 16, 12}, 3);
  std::vector<float> queries = randomQueries(20, 4);
  std::vector<float> vector = run(fixture, queries, 20, false);
  std::vector<float> scalar = run(fixture, queries, 20, true);
  for (size_t index = 0; index < vector.size(); ++index)
    ASSERT_EQ(vector[index], scalar[index]) << "element " << index;
}

TEST(HalfAccumulatingAttention, QueriesSeeOnlyEarlierKeys) {
  // Two fixtures equal in their first 20 tokens; the first query row (the
  // 21st token) must not see the rest.
  Fixture a = makeFixture({16, 16, 8}, 5);
  Fixture b = makeFixture({16, 16, 8}, 5);
  std::vector<float> changed(kKvDim, 3.0f);
  for (int slot = 5; slot < 16; ++slot) // logical tokens 21..31
    b.storage->writeToken(0, b.blockIds[1], slot, changed.data(),
                          changed.data());
  std::vector<float> queries = randomQueries(20, 6); // tokens 20..39
  std::vector<float> outputA = run(a, queries, 20, false);
  std::vector<float> outputB = run(b, queries, 20, false);
  for (int64_t d = 0; d < kQueryDim; ++d)
    EXPECT_EQ(outputA[size_t(d)], outputB[size_t(d)]);
  double difference = 0;
  for (int64_t d = 0; d < kQueryDim; ++d)
    difference += std::abs(outputA[size_t(19 * kQueryDim + d)] -
                           outputB[size_t(19 * kQueryDim + d)]);
  EXPECT_GT(difference, 0.0); // the last row does see them
}

} // namespace
