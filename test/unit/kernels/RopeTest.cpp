//===- RopeTest.cpp - RoPE kernels against the closed-form rotation -------===//

#include "runtime/kernels/cpu/Rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;

/// The rotation written out from its definition, in double precision.
std::vector<double> rotateReference(const std::vector<float> &head,
                                    RopeOrder order, int rotaryDim,
                                    double theta, double position,
                                    double linearFactor) {
  std::vector<double> out(head.begin(), head.end());
  int half = rotaryDim / 2;
  for (int pair = 0; pair < half; ++pair) {
    double angle =
        position / linearFactor * std::pow(theta, -2.0 * pair / rotaryDim);
    int first = order == RopeOrder::Normal ? 2 * pair : pair;
    int second = order == RopeOrder::Normal ? 2 * pair + 1 : pair + half;
    double a = head[size_t(first)], b = head[size_t(second)];
    out[size_t(first)] = a * std::cos(angle) - b * std::sin(angle);
    out[size_t(second)] = a * std::sin(angle) + b * std::cos(angle);
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
  for (int row = 0; row < rows; ++row)
    for (int head = 0; head < numHeads; ++head) {
      std::vector<float> in(original.begin() + row * stride + head * headDim,
                            original.begin() + row * stride +
                                (head + 1) * headDim);
      std::vector<double> expected = rotateReference(
          in, order, rotaryDim, config.theta, positions[size_t(row)],
          scaling == RopeScaling::Linear ? factor : 1.0);
      for (int dim = 0; dim < headDim; ++dim)
        EXPECT_NEAR(x[size_t(row * stride + head * headDim + dim)],
                    expected[size_t(dim)], 2e-4)
            << "row " << row << " head " << head << " dim " << dim;
    }
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
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(x[size_t(i)], y[size_t(i)], 1e-5) << i;
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
  // Pair 0 turns fastest: pure extrapolation (the unscaled angle).
  EXPECT_NEAR(yarn[0], std::cos(1000.0) * magnitude, 1e-4);
  // The last pair turns slowest: pure interpolation (angle / factor).
  double slow = 1000.0 * std::pow(10000.0, -62.0 / 64) / 4;
  EXPECT_NEAR(yarn[31], std::cos(slow) * magnitude, 1e-4);
  EXPECT_NEAR(yarn[32 + 31], std::sin(slow) * magnitude, 1e-4);
}

} // namespace
