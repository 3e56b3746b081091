//===- LlamaCppNumericsTest.cpp - RoPE and SwiGLU with llama.cpp's roundings =//
//
// The kernels must compute what they claim up to f32 rounding (the exact
// roundings are checked end to end by //test/unit/model:reference_test,
// which compares greedy continuations with llama.cpp's token for token).
// Each check is held to the bound of the kernel's arithmetic (below).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "test/unit/kernels/ErrorBounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;
using namespace spanc::test;

/// One ulp of the f32 value nearest `value` (a normal one).
double ulp(double value) {
  return std::ldexp(1.0, std::ilogb(float(value)) - 23);
}

/// ggml's vector exp (ggml_v_expf, reduction and polynomial, bit for bit):
/// the Arm optimized-routines sequence it comes from is bounded by 1.45 ulp
/// plus 0.5 for the last rounding; this AVX-512 port ends in a fused
/// multiply-add whose result lies in [1/sqrt(2), sqrt(2)], and half an ulp
/// of a value just above 1 is a whole ulp of a result just below it,
/// before scalef: one more ulp. 3 ulps (observed: 2.14, e.g. at x = 12.6),
/// so not the "two ulps" this test used to claim; at most 6u of the value.
constexpr double kExpUlps = 3;

/// SwiGLU's relative error, g / (1 + exp(-g)) * u: the exp's 6u (kExpUlps),
/// which 1 + exp carries at most whole (exp / (1 + exp) <= 1), and one
/// rounding each for the sum, the division and the product. Every step
/// multiplies or adds positive numbers: the bound is relative to the
/// result, however small.
constexpr double kSwiGluError =
    2 * kExpUlps * kUnitRoundoff + 3 * kUnitRoundoff;

/// One rotated element of ggml's RoPE, fma(x0, c, -(x1 s)), against the
/// rotation by the exact angle: the f32 angle is position * scale^pair, a
/// running product (ggml's theta *= theta_scale) whose `pair` roundings and
/// whose scale = powf(base, -2 / rotaryDim) (one ulp, 2u, and the exponent's
/// own rounding, u |exponent ln base|) make a relative error of
/// pair (3 + |exponent ln base|) u; cosf and sinf are within one ulp (2u
/// absolute, for values up to 1); x1 s and the fused multiply-add round
/// once each. All of it times |x0| + |x1|, plus the reference angle's own
/// double roundings.
double ropeError(double angle, int pair, double base, int rotaryDim, double x0,
                 double x1) {
  const double exponentLog = 2.0 / rotaryDim * std::log(base);
  const double angleError =
      std::abs(angle) *
      (pair * (3 + exponentLog) * kUnitRoundoff + 4 * kDoubleRoundoff);
  return (angleError + 4 * kUnitRoundoff) * (std::abs(x0) + std::abs(x1));
}

TEST(LlamaCppNumerics, ExponentialIsWithinThreeUlps) {
  if (!hasLlamaCppNumerics())
    GTEST_SKIP() << "no AVX-512";
  std::vector<float> x;
  for (float value = -87.0f; value <= 88.0f; value += 0.0137f)
    x.push_back(value);
  std::vector<float> y(x.size());
  expLlamaCpp(x.data(), y.data(), int64_t(x.size()));
  double largestUlps = 0;
  for (size_t index = 0; index < x.size(); ++index) {
    double expected = std::exp(double(x[index]));
    EXPECT_NEAR(y[index], expected, kExpUlps * ulp(expected))
        << "x = " << x[index];
    largestUlps =
        std::max(largestUlps, std::abs(y[index] - expected) / ulp(expected));
  }
  std::printf("%s path: largest exp error %.3g ulp\n", isaLevelName(isaLevel()),
              largestUlps);
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
  double largestRatio = 0;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t col = 0; col < cols; ++col) {
      double g = gateUp[size_t(row * 2 * cols + col)];
      double u = gateUp[size_t(row * 2 * cols + cols + col)];
      double expected = g / (1 + std::exp(-g)) * u;
      const double bound = kSwiGluError * std::abs(expected);
      largestRatio =
          std::max(largestRatio,
                   errorRatio(out[size_t(row * cols + col)], expected, bound));
      EXPECT_NEAR(out[size_t(row * cols + col)], expected, bound)
          << "g " << g << " u " << u;
    }
  std::printf("%s path, SwiGLU: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()), largestRatio);
}

TEST(LlamaCppNumerics, RopeRotatesPairsByPositionTimesFrequency) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  double largestRatio = 0;
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
          double tolerance =
              ropeError(angle, pair, 100000.0, 48, in[first], in[second]);
          const double expectedFirst = in[first] * c - in[second] * s,
                       expectedSecond = in[first] * s + in[second] * c;
          largestRatio = std::max(
              {largestRatio, errorRatio(out[first], expectedFirst, tolerance),
               errorRatio(out[second], expectedSecond, tolerance)});
          EXPECT_NEAR(out[first], expectedFirst, tolerance);
          EXPECT_NEAR(out[second], expectedSecond, tolerance);
        }
        for (int d = 48; d < 64; ++d)
          EXPECT_EQ(out[d], in[d]);
      }
    // Position 0 is the identity, exactly.
    for (int64_t d = 0; d < 2 * 64; ++d)
      EXPECT_EQ(x[size_t(d)], original[size_t(d)]);
  }
  std::printf("%s path, RoPE: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()), largestRatio);
}

} // namespace
