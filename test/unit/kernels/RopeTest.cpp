//===- RopeTest.cpp - RoPE kernels against the closed-form rotation -------===//
//
// Angles are computed in double and their cos/sin rounded to f32 once
// (ropeAngles), on every path; the rotation is f32 arithmetic. Each check is
// held to the bound that arithmetic gives (the functions below).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Rope.h"

#include "runtime/kernels/FloatBits.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "test/unit/kernels/ErrorBounds.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;
using namespace spanc::test;

/// A table entry's error against cos/sin of the exact angle, for entries of
/// magnitude at most 1: the angle's double evaluation (a pow, a product and
/// a division: a few double roundings of the angle, |angle| * 4 * 2^-53
/// absolute) and the one rounding of cos/sin to f32 (u).
double tableError(double angle) {
  return kUnitRoundoff + 4 * kDoubleRoundoff * std::abs(angle);
}

/// The bound of one rotated element a c - b s (or a s + b c) computed in
/// f32 from f32 table entries: the entries' errors (tableError, of |a c|
/// and |b s|) and the f32 arithmetic, at most two roundings (the products
/// and the difference, or a product and a fused multiply-add) of
/// |a c| + |b s|. With |c|, |s| <= 1 that is at most
/// (tableError + 2u) (|a| + |b|).
double rotationError(double a, double b, double angle) {
  return (tableError(angle) + 2 * kUnitRoundoff) * (std::abs(a) + std::abs(b));
}

/// The rotation written out from its definition, in double precision;
/// `bounds` receives each element's rotationError (0 past rotaryDim: the
/// rest is copied).
std::vector<double> rotateReference(const std::vector<float> &head,
                                    RopeOrder order, int rotaryDim,
                                    double theta, double position,
                                    double linearFactor,
                                    std::vector<double> &bounds) {
  std::vector<double> out(head.begin(), head.end());
  bounds.assign(head.size(), 0.0);
  int half = rotaryDim / 2;
  for (int pair = 0; pair < half; ++pair) {
    double angle =
        position / linearFactor * std::pow(theta, -2.0 * pair / rotaryDim);
    int first = order == RopeOrder::Normal ? 2 * pair : pair;
    int second = order == RopeOrder::Normal ? 2 * pair + 1 : pair + half;
    double a = head[size_t(first)], b = head[size_t(second)];
    out[size_t(first)] = a * std::cos(angle) - b * std::sin(angle);
    out[size_t(second)] = a * std::sin(angle) + b * std::cos(angle);
    bounds[size_t(first)] = bounds[size_t(second)] = rotationError(a, b, angle);
  }
  return out;
}

void checkApplyRope(RopeOrder order, RopeScaling scaling, float factor,
                    int headDim, int rotaryDim) {
  RopeConfig config;
  config.headDim = headDim;
  config.rotaryDim = rotaryDim;
  config.order = order;
  config.theta = 100000.0f;
  config.scaling = scaling;
  config.factor = factor;
  RopeTable table(config, 4096);
  const int numHeads = 3, rows = 4;
  const int64_t stride = numHeads * headDim + 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(rows * stride));
  for (float &value : x)
    value = normal(rng);
  std::vector<float> original = x;
  std::vector<int32_t> positions = {0, 1, 17, 4000};
  applyRope(RopeShape{rows, numHeads, stride}, table, positions.data(),
            x.data());
  double largestRatio = 0;
  for (int row = 0; row < rows; ++row)
    for (int head = 0; head < numHeads; ++head) {
      std::vector<float> in(original.begin() + row * stride + head * headDim,
                            original.begin() + row * stride +
                                (head + 1) * headDim);
      std::vector<double> bounds;
      std::vector<double> expected = rotateReference(
          in, order, rotaryDim, config.theta, positions[size_t(row)],
          scaling == RopeScaling::Linear ? factor : 1.0, bounds);
      for (int dim = 0; dim < headDim; ++dim) {
        const double error =
            std::abs(x[size_t(row * stride + head * headDim + dim)] -
                     expected[size_t(dim)]);
        largestRatio = std::max(largestRatio, bounds[size_t(dim)] > 0
                                                  ? error / bounds[size_t(dim)]
                                              : error > 0 ? 1e300
                                                          : 0.0);
        EXPECT_LE(error, bounds[size_t(dim)])
            << "row " << row << " head " << head << " dim " << dim;
      }
    }
  std::printf("%s path: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()), largestRatio);
}

TEST(CpuRope, NormalOrderRotatesAdjacentPairs) {
  checkApplyRope(RopeOrder::Normal, RopeScaling::None, 1, 64, 64);
}

TEST(CpuRope, NeoxOrderRotatesHalves) {
  checkApplyRope(RopeOrder::NeoX, RopeScaling::None, 1, 64, 64);
}

TEST(CpuRope, PartialRotaryDimLeavesTheRestAlone) {
  checkApplyRope(RopeOrder::NeoX, RopeScaling::None, 1, 64, 32);
}

TEST(CpuRope, LinearScalingDividesThePosition) {
  checkApplyRope(RopeOrder::Normal, RopeScaling::Linear, 4, 64, 64);
}

TEST(CpuRope, EveryPathRotatesToRotateHeadsBits) {
  // applyRope's vector path must round as rotateHead does (the AVX-512
  // rows of a prompt and the scalar rotation of a relocated or decoded
  // key meet in one cache). Shapes on and off the vector path's multiples.
  struct Case {
    RopeOrder order;
    int headDim, rotaryDim;
  };
  for (const Case &c :
       {Case{RopeOrder::Normal, 64, 64}, Case{RopeOrder::Normal, 128, 96},
        Case{RopeOrder::Normal, 64, 40}, Case{RopeOrder::NeoX, 64, 64},
        Case{RopeOrder::NeoX, 128, 64}, Case{RopeOrder::NeoX, 64, 48}}) {
    RopeConfig config;
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.order = c.order;
    RopeTable table(config, 8192);
    const int numHeads = 5, rows = 7;
    const int64_t stride = numHeads * c.headDim + 3;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::vector<float> x(size_t(rows * stride));
    for (float &value : x)
      value = normal(rng);
    std::vector<float> expected = x;
    const std::vector<int32_t> positions = {0, 1, 15, 16, 777, 4095, 8191};
    applyRope(RopeShape{rows, numHeads, stride}, table, positions.data(),
              x.data());
    for (int row = 0; row < rows; ++row)
      for (int head = 0; head < numHeads; ++head)
        rotateHead(c.order, c.rotaryDim, table.row(positions[size_t(row)]),
                   expected.data() + row * stride + head * c.headDim, 1);
    for (size_t index = 0; index < x.size(); ++index)
      ASSERT_EQ(spanc::kernels::floatToBits(x[index]),
                spanc::kernels::floatToBits(expected[index]))
          << "order " << int(c.order) << " head dim " << c.headDim
          << " rotary dim " << c.rotaryDim << " element " << index;
  }
}

TEST(CpuRope, RotationsComposeByAddingPositions) {
  // Relocation relies on rotate(p) then rotate(delta) == rotate(p + delta).
  RopeConfig config;
  config.headDim = config.rotaryDim = 64;
  config.theta = 10000.0f;
  std::vector<float> x(64), y;
  for (int i = 0; i < 64; ++i)
    x[size_t(i)] = std::sin(float(i));
  y = x;
  std::vector<float> first(64), second(64), both(64);
  ropeAngles(config, 100, first.data(), first.data() + 32);
  ropeAngles(config, -37, second.data(), second.data() + 32);
  ropeAngles(config, 63, both.data(), both.data() + 32);
  rotateHead(config.order, 64, first.data(), x.data(), 1);
  rotateHead(config.order, 64, second.data(), x.data(), 1);
  rotateHead(config.order, 64, both.data(), y.data(), 1);
  // Each rotation's error vector, per pair, is at most sqrt(2) times its
  // elements' rotationError (of |a| + |b| <= sqrt(2) |(a, b)|): 2 (tableError
  // + 2u) |(a, b)|, turned but not grown by the rotations after it. Three
  // rotations (two composed, one direct) on a pair of norm r differ by at
  // most 3 * 2 (tableError + 2u) r per element; the angles (100, -37 and 63
  // times a frequency below 1) are exact sums in double up to their own
  // tableError term.
  const int half = 32;
  for (int i = 0; i < 64; ++i) {
    const int pair = i % half;
    const double norm =
        std::hypot(double(y[size_t(pair)]), double(y[size_t(pair + half)]));
    EXPECT_NEAR(x[size_t(i)], y[size_t(i)],
                3 * 2 * (tableError(100) + 2 * kUnitRoundoff) * norm)
        << i;
  }
}

TEST(CpuRope, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  RopeConfig config;
  config.headDim = config.rotaryDim = 64;
  config.theta = 10000.0f;
  config.scaling = RopeScaling::Yarn;
  config.factor = 4;
  config.originalContext = 4096;
  std::vector<float> yarn(64);
  ropeAngles(config, 1000, yarn.data(), yarn.data() + 32);
  double magnitude = 1.0 + 0.1 * std::log(4.0);
  // Each entry is cos/sin of a double angle times the magnitude, rounded to
  // f32 once: u of the entry, and the angle's double error (tableError's
  // second term) times the magnitude; the magnitude's own double
  // evaluation is below that.
  auto near = [&](double actual, double expected, double angle) {
    EXPECT_NEAR(actual, expected,
                kUnitRoundoff * std::abs(expected) +
                    (tableError(angle) - kUnitRoundoff) * magnitude);
  };
  // Pair 0 turns fastest: pure extrapolation (the unscaled angle).
  near(yarn[0], std::cos(1000.0) * magnitude, 1000.0);
  // The last pair turns slowest: pure interpolation (angle / factor).
  double slow = 1000.0 * std::pow(10000.0, -62.0 / 64) / 4;
  near(yarn[31], std::cos(slow) * magnitude, slow);
  near(yarn[32 + 31], std::sin(slow) * magnitude, slow);
}

} // namespace
