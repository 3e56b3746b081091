//===- LlamaCppNumericsTest.cpp - RoPE and SwiGLU with llama.cpp's roundings =//
//
// The kernels must compute what they claim up to f32 rounding (the exact
// roundings are checked end to end by //test/unit/model:reference_test,
// which compares greedy continuations with llama.cpp's token for token).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;

TEST(LlamaCppNumerics, ExponentialIsWithinTwoUlps) {
  if (!hasLlamaCppNumerics())
    GTEST_SKIP() << "no AVX-512";
  std::vector<float> x;
  for (float value = -87.0f; value <= 88.0f; value += 0.0137f)
    x.push_back(value);
  std::vector<float> y(x.size());
  expLlamaCpp(x.data(), y.data(), int64_t(x.size()));
  for (size_t index = 0; index < x.size(); ++index) {
    double expected = std::exp(double(x[index]));
    EXPECT_NEAR(y[index], expected, 2.5e-7 * expected) << "x = " << x[index];
  }
}

TEST(LlamaCppNumerics, SwiGluIsSiluTimesUp) {
  if (!hasLlamaCppNumerics())
    GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const int64_t cols = 1541; // 96 vectors and a scalar tail
  std::vector<float> gateUp(size_t(2 * 2 * cols)), out(size_t(2 * cols));
  for (float &value : gateUp)
    value = normal(rng);
  swiGluLlamaCpp(RowShape{2, cols, 2 * cols, cols}, gateUp.data(),
                 gateUp.data() + cols, out.data());
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t col = 0; col < cols; ++col) {
      double g = gateUp[size_t(row * 2 * cols + col)];
      double u = gateUp[size_t(row * 2 * cols + cols + col)];
      double expected = g / (1 + std::exp(-g)) * u;
      EXPECT_NEAR(out[size_t(row * cols + col)], expected,
                  1e-6 * std::abs(expected) + 1e-7);
    }
}

TEST(LlamaCppNumerics, RopeRotatesPairsByPositionTimesFrequency) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (bool neox : {false, true}) {
    LlamaCppRopeShape shape;
    shape.rows = 3;
    shape.numHeads = 2;
    shape.headDim = 64;
    shape.rotaryDim = 48; // the last 16 dimensions stay as they are
    shape.rowStride = 2 * 64 + 5;
    shape.neox = neox;
    shape.base = 100000.0f;
    std::vector<float> x(size_t(shape.rows * shape.rowStride));
    for (float &value : x)
      value = normal(rng);
    std::vector<float> original = x;
    int32_t positions[] = {0, 17, 1000};
    ropeLlamaCpp(shape, positions, x.data());
    for (int64_t row = 0; row < shape.rows; ++row)
      for (int64_t head = 0; head < shape.numHeads; ++head) {
        const float *in = original.data() + row * shape.rowStride + head * 64;
        const float *out = x.data() + row * shape.rowStride + head * 64;
        for (int pair = 0; pair < 24; ++pair) {
          int first = neox ? pair : 2 * pair,
              second = neox ? pair + 24 : 2 * pair + 1;
          double angle = positions[row] * std::pow(100000.0, -2.0 * pair / 48);
          double c = std::cos(angle), s = std::sin(angle);
          // f32 angles drift by position * pair * 2^-24 (the running product).
          double tolerance = 1e-6 + 1e-7 * positions[row] * (pair + 1);
          EXPECT_NEAR(out[first], in[first] * c - in[second] * s, tolerance);
          EXPECT_NEAR(out[second], in[first] * s + in[second] * c, tolerance);
        }
        for (int d = 48; d < 64; ++d)
          EXPECT_EQ(out[d], in[d]);
      }
    // Position 0 is the identity, exactly.
    for (int64_t d = 0; d < 2 * 64; ++d)
      EXPECT_EQ(x[size_t(d)], original[size_t(d)]);
  }
}

} // namespace
