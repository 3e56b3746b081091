//===- ReropeTest.cpp - ReRoPE relocation against direct rotation ---------===//
//
// Stored K is made by rotating random head vectors at their stored positions
// in double; relocation must give what rotating the same vectors directly at
// the target positions gives (again in double), within relocationError of
// the f32 arithmetic plus the f32 store's rounding, for both pair orders,
// both head layouts, partial rotary dims, in-place and copying ops.
// Half-precision storage: the relocated halves are the stored halves turned
// (within relocationError) and rounded once (within half an f16 ulp).
// The scalar and AVX-512 paths do the same roundings: one bound for both.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Rerope.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Half.h"
#include "test/unit/kernels/ErrorBounds.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace spanc::cpu;
using namespace spanc::test;

namespace {

/// One relocated element, a c - b s (or a s + b c), against the exact turn
/// by `angle` of the pair (a, b) it reads: the table's cos/sin of
/// delta * frequency are computed in double (a few roundings of the angle,
/// 4 * 2^-53 |angle|) and rounded to f32 once (u of each); the f32
/// arithmetic rounds twice (a product and a fused multiply-add, u of
/// |a c| + |b s| each). With |c|, |s| <= 1: (3u + 4 * 2^-53 |angle|)
/// (|a| + |b|).
double relocationError(double a, double b, double angle) {
  return (3 * kUnitRoundoff + 4 * kDoubleRoundoff * std::abs(angle)) *
         (std::abs(a) + std::abs(b));
}

struct Case {
  RopePairing pairing;
  bool dimMajor;
  int rotaryDim;
};

/// A little pool of blocks (all layers in one vector per layer).
struct Fixture {
  KvBlockLayout layout;
  int numBlocks;
  std::vector<std::vector<float>> keys, values;
  std::vector<void *> keyPointers, valuePointers;

  Fixture(int numLayers, int numHeads, int headDim, int blockSize,
          int numBlocks, bool dimMajor, int64_t padding)
      : numBlocks(numBlocks) {
    layout.numLayers = numLayers;
    layout.numKvHeads = numHeads;
    layout.headDim = headDim;
    layout.blockSize = blockSize;
    if (dimMajor) {
      layout.tokenStride = 1;
      layout.dimStride = blockSize;
    } else {
      layout.dimStride = 1;
      layout.tokenStride = headDim;
    }
    // `padding` floats after each head make a non-compact layout.
    layout.headStride = int64_t(headDim) * blockSize + padding;
    layout.blockStride = layout.headStride * numHeads;
    for (int layer = 0; layer < numLayers; ++layer) {
      keys.emplace_back(size_t(layout.blockStride) * numBlocks, 0.0f);
      values.emplace_back(size_t(layout.blockStride) * numBlocks, 0.0f);
    }
    for (int layer = 0; layer < numLayers; ++layer) {
      keyPointers.push_back(keys[layer].data());
      valuePointers.push_back(values[layer].data());
    }
  }

  size_t at(int block, int head, int token, int dim) const {
    return size_t(block * layout.blockStride + head * layout.headStride +
                  token * layout.tokenStride + dim * layout.dimStride);
  }
};

/// `x` rotated at `position` in double (the reference RoPE).
std::vector<double> rotateReference(const std::vector<double> &x,
                                    RopePairing pairing, int rotaryDim,
                                    double theta, double position) {
  std::vector<double> y = x;
  const int half = rotaryDim / 2;
  for (int pair = 0; pair < half; ++pair) {
    double angle = position * std::pow(theta, -2.0 * pair / rotaryDim);
    int first = pairing == RopePairing::Normal ? 2 * pair : pair;
    int second = pairing == RopePairing::Normal ? 2 * pair + 1 : pair + half;
    y[first] = x[first] * std::cos(angle) - x[second] * std::sin(angle);
    y[second] = x[first] * std::sin(angle) + x[second] * std::cos(angle);
  }
  return y;
}

/// Fills block `block` with K = raw vectors rotated at stored positions and
/// random V; returns the raw vectors, indexed [layer][head][token][dim].
std::vector<double> fillBlock(Fixture &fixture, int block, const Case &c,
                              double theta, int64_t storedPosition,
                              std::mt19937 &random) {
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  const KvBlockLayout &layout = fixture.layout;
  std::vector<double> raw;
  for (int layer = 0; layer < layout.numLayers; ++layer)
    for (int head = 0; head < layout.numKvHeads; ++head)
      for (int token = 0; token < layout.blockSize; ++token) {
        std::vector<double> x(size_t(layout.headDim));
        for (double &value : x)
          value = uniform(random);
        raw.insert(raw.end(), x.begin(), x.end());
        std::vector<double> y = rotateReference(
            x, c.pairing, c.rotaryDim, theta, double(storedPosition + token));
        for (int dim = 0; dim < layout.headDim; ++dim) {
          fixture.keys[layer][fixture.at(block, head, token, dim)] =
              float(y[dim]);
          fixture.values[layer][fixture.at(block, head, token, dim)] =
              float(uniform(random));
        }
      }
  return raw;
}

/// Max over K(block) of |K - raw rotated at target positions| over its
/// bound (<= 1 passes). Stored K is raw rotated in double and rounded to f32
/// (u of each element, turned along when relocated: u (|a| + |b|) of a
/// pair); a `relocated` block adds relocationError, whose |a| + |b| is at
/// most sqrt(2) times the pair's norm r (a rotation keeps r), and the
/// angle is at most the target position (frequencies <= 1), which also
/// bounds the reference's own double angle against the table's.
double maxKeyError(const Fixture &fixture, int block,
                   const std::vector<double> &raw, const Case &c, double theta,
                   int64_t targetPosition, bool relocated) {
  const KvBlockLayout &layout = fixture.layout;
  double worst = 0;
  size_t offset = 0;
  for (int layer = 0; layer < layout.numLayers; ++layer)
    for (int head = 0; head < layout.numKvHeads; ++head)
      for (int token = 0; token < layout.blockSize; ++token) {
        std::vector<double> x(raw.begin() + long(offset),
                              raw.begin() + long(offset) + layout.headDim);
        offset += size_t(layout.headDim);
        std::vector<double> expected = rotateReference(
            x, c.pairing, c.rotaryDim, theta, double(targetPosition + token));
        const int half = c.rotaryDim / 2;
        for (int dim = 0; dim < layout.headDim; ++dim) {
          double bound = kUnitRoundoff * std::abs(expected[dim]);
          if (dim < c.rotaryDim) {
            const int pair =
                c.pairing == RopePairing::Normal ? dim / 2 : dim % half;
            const int first =
                c.pairing == RopePairing::Normal ? 2 * pair : pair;
            const int second =
                c.pairing == RopePairing::Normal ? 2 * pair + 1 : pair + half;
            const double norm = std::hypot(x[first], x[second]);
            bound = kUnitRoundoff * std::sqrt(2.0) * norm;
            if (relocated)
              bound +=
                  relocationError(norm, norm, double(targetPosition + token)) *
                  std::sqrt(2.0) / 2;
          }
          const double error = std::abs(
              double(fixture.keys[layer][fixture.at(block, head, token, dim)]) -
              expected[dim]);
          worst = std::max(worst, bound > 0   ? error / bound
                                  : error > 0 ? 1e300
                                              : 0.0);
        }
      }
  return worst;
}

class Relocation : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(Relocation, MatchesDirectRotationAtTargetPositions) {
  const Case c = std::get<0>(GetParam());
  const bool vector = std::get<1>(GetParam());
  const double theta = 10000.0;
  const int headDim = 64;
  // Block size 16 and a ragged 12 (masked vector tails).
  double largestRatio = 0;
  for (int blockSize : {16, 12}) {
    for (int64_t padding : {0, 3}) {
      Fixture fixture(3, 2, headDim, blockSize, 6, c.dimMajor, padding);
      std::mt19937 random(1234 + blockSize + int(padding));
      // Block 0 in place by +37; block 1 in place by -4096 (to an earlier
      // position); block 2 copied to 3 by +8000; block 4 copied to 5 by -17.
      struct Move {
        int source, destination;
        int64_t stored, target;
      };
      const Move moves[] = {
          {0, 0, 16, 53}, {1, 1, 4112, 16}, {2, 3, 0, 8000}, {4, 5, 48, 31}};
      std::vector<std::vector<double>> raw(6);
      for (const Move &move : moves)
        raw[move.source] =
            fillBlock(fixture, move.source, c, theta, move.stored, random);
      std::vector<RelocationOp> ops;
      for (const Move &move : moves)
        ops.push_back({uint32_t(move.source), uint32_t(move.destination),
                       move.target - move.stored});
      std::vector<double> frequencies = ropeFrequencies(theta, c.rotaryDim);
      RopeRotation rotation{c.pairing, c.rotaryDim, frequencies.data()};
      if (vector)
        relocateBlocks(fixture.layout, rotation, fixture.keyPointers.data(),
                       fixture.valuePointers.data(), ops);
      else
        relocateBlocksScalar(fixture.layout, rotation,
                             fixture.keyPointers.data(),
                             fixture.valuePointers.data(), ops);
      for (const Move &move : moves) {
        SCOPED_TRACE("block " + std::to_string(move.source) + " -> " +
                     std::to_string(move.destination) + ", block size " +
                     std::to_string(blockSize) + ", padding " +
                     std::to_string(padding));
        const double ratio =
            maxKeyError(fixture, move.destination, raw[move.source], c, theta,
                        move.target, /*relocated=*/true);
        largestRatio = std::max(largestRatio, ratio);
        EXPECT_LE(ratio, 1.0);
        if (move.source == move.destination)
          continue;
        EXPECT_LE(maxKeyError(fixture, move.source, raw[move.source], c, theta,
                              move.stored, /*relocated=*/false),
                  1.0)
            << "the source of a copy changed";
        for (int layer = 0; layer < 3; ++layer)
          for (int head = 0; head < 2; ++head)
            for (int token = 0; token < blockSize; ++token)
              for (int dim = 0; dim < headDim; ++dim)
                ASSERT_EQ(fixture.values[layer][fixture.at(move.destination,
                                                           head, token, dim)],
                          fixture.values[layer][fixture.at(move.source, head,
                                                           token, dim)]);
      }
    }
  }
  std::printf("%s path, %s: largest relocation error %.3g of its bound\n",
              spanc::cpu::isaLevelName(spanc::cpu::isaLevel()),
              vector ? "vector" : "scalar", largestRatio);
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, Relocation,
    ::testing::Combine(
        ::testing::Values(Case{RopePairing::Normal, false, 64},
                          Case{RopePairing::NeoX, false, 64},
                          Case{RopePairing::Normal, true, 64},
                          Case{RopePairing::NeoX, true, 64},
                          // Partial rotary dims: the rest is only copied.
                          Case{RopePairing::Normal, false, 32},
                          Case{RopePairing::NeoX, true, 48}),
        ::testing::Bool()));

TEST(Relocation, ZeroDeltaCopyIsExact) {
  Fixture fixture(2, 3, 64, 16, 2, false, 0);
  std::mt19937 random(7);
  Case c{RopePairing::Normal, false, 64};
  fillBlock(fixture, 0, c, 10000.0, 32, random);
  std::vector<double> frequencies = ropeFrequencies(10000.0, 64);
  RopeRotation rotation{c.pairing, 64, frequencies.data()};
  RelocationOp op{0, 1, 0};
  relocateBlocks(fixture.layout, rotation, fixture.keyPointers.data(),
                 fixture.valuePointers.data(), op);
  for (int layer = 0; layer < 2; ++layer)
    for (int64_t i = 0; i < fixture.layout.blockStride; ++i) {
      ASSERT_EQ(fixture.keys[layer][size_t(fixture.layout.blockStride + i)],
                fixture.keys[layer][size_t(i)]);
      ASSERT_EQ(fixture.values[layer][size_t(fixture.layout.blockStride + i)],
                fixture.values[layer][size_t(i)]);
    }
}

TEST(Relocation, FrequenciesFollowTheta) {
  std::vector<double> frequencies = ropeFrequencies(500000.0, 64, 0.25);
  ASSERT_EQ(frequencies.size(), 32u);
  EXPECT_DOUBLE_EQ(frequencies[0], 0.25);
  // A pow and a product in double: a few double roundings of the value.
  const double expected = 0.25 * std::pow(500000.0, -62.0 / 64);
  EXPECT_NEAR(frequencies[31], expected, 4 * kDoubleRoundoff * expected);
}

} // namespace

namespace {

TEST(Relocation, TakesTheVectorPathWhereTheCpuHasAvx512) {
  // The kernel path's features, not the silicon's: under a cap below
  // AVX-512 (SPANC_ISA) the scalar path must run.
  if (!spanc::cpu::cpuFeatures().hasAvx512()) {
    std::vector<double> frequencies = ropeFrequencies(10000.0, 64);
    KvBlockLayout dimMajor{30, 3, 64, 16, 3 * 64 * 16, 64 * 16, 1, 16};
    RopeRotation rotation{RopePairing::Normal, 64, frequencies.data()};
    EXPECT_FALSE(relocationUsesAvx512(dimMajor, rotation));
    GTEST_SKIP() << "no AVX-512 on this kernel path: only the scalar path "
                    "runs";
  }
  std::vector<double> frequencies = ropeFrequencies(10000.0, 64);
  KvBlockLayout tokenMajor{30, 3, 64, 16, 3 * 64 * 16, 64 * 16, 64, 1};
  KvBlockLayout dimMajor{30, 3, 64, 16, 3 * 64 * 16, 64 * 16, 1, 16};
  for (RopePairing pairing : {RopePairing::Normal, RopePairing::NeoX}) {
    RopeRotation rotation{pairing, 64, frequencies.data()};
    EXPECT_TRUE(relocationUsesAvx512(tokenMajor, rotation));
    EXPECT_TRUE(relocationUsesAvx512(dimMajor, rotation));
  }
}

} // namespace

namespace {

TEST(Relocation, ThreadedBatchEqualsOneOpAtATime) {
  // 12 ops (above the threading threshold) on 2 threads, in place and
  // copying, against the same ops applied one call at a time.
  std::mt19937 random(5);
  Fixture threaded(4, 3, 64, 16, 24, true, 0),
      serial(4, 3, 64, 16, 24, true, 0);
  Case c{RopePairing::Normal, true, 64};
  for (int block = 0; block < 12; ++block)
    fillBlock(threaded, block, c, 10000.0, 16 * block, random);
  serial.keys = threaded.keys;
  serial.values = threaded.values;
  for (int layer = 0; layer < 4; ++layer) {
    serial.keyPointers[layer] = serial.keys[layer].data();
    serial.valuePointers[layer] = serial.values[layer].data();
  }
  std::vector<RelocationOp> ops;
  for (uint32_t block = 0; block < 12; ++block)
    ops.push_back(
        {block, block % 2 ? block : block + 12, int64_t(block * 37) - 200});
  std::vector<double> frequencies = ropeFrequencies(10000.0, 64);
  RopeRotation rotation{c.pairing, 64, frequencies.data()};
  omp_set_num_threads(2);
  relocateBlocks(threaded.layout, rotation, threaded.keyPointers.data(),
                 threaded.valuePointers.data(), ops);
  for (const RelocationOp &op : ops)
    relocateBlocks(serial.layout, rotation, serial.keyPointers.data(),
                   serial.valuePointers.data(), op);
  EXPECT_EQ(threaded.keys, serial.keys);
  EXPECT_EQ(threaded.values, serial.values);
}

} // namespace

namespace {

/// The spacing of IEEE halves around |x| (2^-24 below the normal range).
double halfUlp(double x) {
  int exponent;
  std::frexp(std::max(std::abs(x), std::ldexp(1.0, -14)), &exponent);
  return std::ldexp(1.0, exponent - 1 - 10);
}

class HalfRelocation : public ::testing::TestWithParam<std::tuple<Case, bool>> {
};

TEST_P(HalfRelocation, TurnsTheStoredHalvesAndRoundsOnce) {
  const Case c = std::get<0>(GetParam());
  const bool vector = std::get<1>(GetParam());
  const double theta = 10000.0;
  const int numLayers = 2, numHeads = 2, headDim = 64;
  for (int blockSize : {16, 12}) {
    SCOPED_TRACE("block size " + std::to_string(blockSize));
    KvBlockLayout layout;
    layout.numLayers = numLayers;
    layout.numKvHeads = numHeads;
    layout.headDim = headDim;
    layout.blockSize = blockSize;
    layout.tokenStride = c.dimMajor ? 1 : headDim;
    layout.dimStride = c.dimMajor ? blockSize : 1;
    layout.headStride = int64_t(headDim) * blockSize;
    layout.blockStride = layout.headStride * numHeads;
    layout.precision = spanc::cpu::KvPrecision::F16;
    const int numBlocks = 4;
    std::vector<std::vector<uint16_t>> keys, values;
    std::vector<void *> keyPointers, valuePointers;
    std::mt19937 random(77 + blockSize);
    std::uniform_real_distribution<double> uniform(-3.0, 3.0);
    for (int layer = 0; layer < numLayers; ++layer) {
      keys.emplace_back(size_t(layout.blockStride) * numBlocks);
      values.emplace_back(size_t(layout.blockStride) * numBlocks);
      for (uint16_t &x : keys.back())
        x = spanc::cpu::floatToHalf(float(uniform(random)));
      for (uint16_t &x : values.back())
        x = spanc::cpu::floatToHalf(float(uniform(random)));
    }
    for (int layer = 0; layer < numLayers; ++layer) {
      keyPointers.push_back(keys[layer].data());
      valuePointers.push_back(values[layer].data());
    }
    const auto before = keys;
    const auto valuesBefore = values;
    // Block 0 in place by +300, block 1 copied to 2 by -41, block 3 copied
    // nowhere (untouched).
    std::vector<RelocationOp> ops = {{0, 0, 300}, {1, 2, -41}};
    std::vector<double> frequencies = ropeFrequencies(theta, c.rotaryDim);
    RopeRotation rotation{c.pairing, c.rotaryDim, frequencies.data()};
    if (vector)
      relocateBlocks(layout, rotation, keyPointers.data(), valuePointers.data(),
                     ops);
    else
      relocateBlocksScalar(layout, rotation, keyPointers.data(),
                           valuePointers.data(), ops);
    auto at = [&](int block, int head, int token, int dim) {
      return size_t(block * layout.blockStride + head * layout.headStride +
                    token * layout.tokenStride + dim * layout.dimStride);
    };
    const int half = c.rotaryDim / 2;
    for (const RelocationOp &op : ops)
      for (int layer = 0; layer < numLayers; ++layer)
        for (int head = 0; head < numHeads; ++head)
          for (int token = 0; token < blockSize; ++token) {
            for (int pair = 0; pair < half; ++pair) {
              int first = c.pairing == RopePairing::Normal ? 2 * pair : pair;
              int second =
                  c.pairing == RopePairing::Normal ? 2 * pair + 1 : pair + half;
              double a = spanc::cpu::halfToFloat(
                  before[layer][at(op.source, head, token, first)]);
              double b = spanc::cpu::halfToFloat(
                  before[layer][at(op.source, head, token, second)]);
              double angle = double(op.delta) * frequencies[size_t(pair)];
              double expected[2] = {a * std::cos(angle) - b * std::sin(angle),
                                    a * std::sin(angle) + b * std::cos(angle)};
              int dims[2] = {first, second};
              for (int which = 0; which < 2; ++which) {
                double got = spanc::cpu::halfToFloat(
                    keys[layer][at(op.destination, head, token, dims[which])]);
                // The f32 turn's error, then one rounding to f16: half an
                // f16 ulp of what was rounded.
                const double turned = relocationError(a, b, angle);
                ASSERT_LE(std::abs(got - expected[which]),
                          0.5 * halfUlp(std::abs(expected[which]) + turned) +
                              turned)
                    << "layer " << layer << " head " << head << " token "
                    << token << " dim " << dims[which];
              }
            }
            for (int dim = c.rotaryDim; dim < headDim; ++dim)
              ASSERT_EQ(keys[layer][at(op.destination, head, token, dim)],
                        before[layer][at(op.source, head, token, dim)]);
            if (op.source != op.destination) {
              for (int dim = 0; dim < headDim; ++dim)
                ASSERT_EQ(values[layer][at(op.destination, head, token, dim)],
                          valuesBefore[layer][at(op.source, head, token, dim)]);
            }
          }
    // The copy's source and the untouched block keep their bits.
    for (int layer = 0; layer < numLayers; ++layer)
      for (int64_t i = 0; i < layout.blockStride; ++i) {
        for (int block : {1, 3}) {
          ASSERT_EQ(keys[layer][size_t(block * layout.blockStride + i)],
                    before[layer][size_t(block * layout.blockStride + i)]);
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, HalfRelocation,
    ::testing::Combine(::testing::Values(Case{RopePairing::Normal, false, 64},
                                         Case{RopePairing::NeoX, false, 64},
                                         Case{RopePairing::Normal, true, 64},
                                         Case{RopePairing::NeoX, true, 64},
                                         Case{RopePairing::NeoX, true, 48}),
                       ::testing::Bool()));

TEST(HalfRelocation, IsWithinOneRoundingOfDirectRotation) {
  // K rotated at its stored position and rounded to half, relocated, against
  // the same raw vector rotated directly at the target and rounded once.
  const double theta = 100000.0;
  const int headDim = 64, blockSize = 16;
  KvBlockLayout layout{1,
                       1,
                       headDim,
                       blockSize,
                       headDim * blockSize,
                       headDim * blockSize,
                       1,
                       blockSize,
                       spanc::cpu::KvPrecision::F16};
  std::vector<double> frequencies = ropeFrequencies(theta, headDim);
  RopeRotation rotation{RopePairing::Normal, headDim, frequencies.data()};
  std::mt19937 random(3);
  std::uniform_real_distribution<double> uniform(-4.0, 4.0);
  std::vector<std::vector<double>> raw(blockSize);
  std::vector<uint16_t> keys(size_t(headDim * blockSize)),
      values(keys.size(), 0);
  const int64_t stored = 7, target = 4000;
  for (int token = 0; token < blockSize; ++token) {
    raw[size_t(token)].resize(headDim);
    for (double &x : raw[size_t(token)])
      x = uniform(random);
    std::vector<double> y =
        rotateReference(raw[size_t(token)], RopePairing::Normal, headDim, theta,
                        double(stored + token));
    for (int dim = 0; dim < headDim; ++dim)
      keys[size_t(dim * blockSize + token)] =
          spanc::cpu::floatToHalf(float(y[size_t(dim)]));
  }
  void *keyLayer = keys.data(), *valueLayer = values.data();
  RelocationOp op{0, 0, target - stored};
  relocateBlocks(layout, rotation, &keyLayer, &valueLayer, op);
  double worstUlps = 0;
  for (int token = 0; token < blockSize; ++token) {
    std::vector<double> direct =
        rotateReference(raw[size_t(token)], RopePairing::Normal, headDim, theta,
                        double(target + token));
    for (int pair = 0; pair < headDim / 2; ++pair) {
      double norm =
          std::hypot(direct[size_t(2 * pair)], direct[size_t(2 * pair + 1)]);
      for (int dim : {2 * pair, 2 * pair + 1}) {
        double got =
            spanc::cpu::halfToFloat(keys[size_t(dim * blockSize + token)]);
        worstUlps = std::max(worstUlps, std::abs(got - direct[size_t(dim)]) /
                                            halfUlp(norm));
      }
    }
  }
  // Stored rounding (<= 1/2 ulp per component, turned) + the new rounding.
  EXPECT_LE(worstUlps, 1.25);
  EXPECT_GT(worstUlps, 0.0) << "f16 storage rounds: an exact match is a bug";
}

} // namespace
