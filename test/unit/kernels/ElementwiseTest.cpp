//===- ElementwiseTest.cpp - CPU row kernels against scalar references ----===//
//
// Each element is held to the bound of the kernel's f32 arithmetic (the
// constants below), the same on every path: the vector and portable loops
// do the same operations, only the order of a row's sum differs.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Elementwise.h"

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

/// RMSNorm's relative error per element, for rows of `cols` values: the
/// sum of squares is cols roundings of the squares (u) and an f32 sum
/// (f32SumError); the mean, + epsilon, sqrt and 1/sqrt add u each, and the
/// square root halves the error of what it takes; x * scale * weight adds
/// two roundings.
double rmsNormError(int64_t cols) {
  return (f32SumError(cols) + 3 * kUnitRoundoff) / 2 + 4 * kUnitRoundoff;
}

/// SwiGLU's relative error per element, gate / (1 + exp(-gate)) * up: the
/// f32 exp is within one ulp (2u of its value), which 1 + exp carries at
/// most whole (exp / (1 + exp) <= 1); the sum, the division and the product
/// add u each. Every step multiplies or adds positive numbers: the bound is
/// relative to the result, however small.
constexpr double kSwiGluError = 2 * kUnitRoundoff + 3 * kUnitRoundoff;

std::vector<float> randomVector(size_t count, unsigned seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float &value : values)
    value = normal(rng);
  return values;
}

void checkRmsNorm(int64_t cols) {
  const int64_t rows = 5, inStride = cols + 24, outStride = cols + 4;
  std::vector<float> x = randomVector(rows * inStride, 1, 3.0f);
  std::vector<float> weight = randomVector(cols, 2);
  std::vector<float> out(rows * outStride, -7.0f);
  RowShape shape{rows, cols, inStride, outStride};
  rmsNorm(shape, x.data(), weight.data(), 1e-5f, out.data());
  double largestRatio = 0;
  for (int64_t row = 0; row < rows; ++row) {
    double sum = 0;
    for (int64_t col = 0; col < cols; ++col)
      sum += double(x[row * inStride + col]) * x[row * inStride + col];
    double scale = 1.0 / std::sqrt(sum / cols + 1e-5);
    for (int64_t col = 0; col < cols; ++col) {
      const double expected = x[row * inStride + col] * scale * weight[col];
      const double bound = rmsNormError(cols) * std::abs(expected);
      largestRatio =
          std::max(largestRatio,
                   errorRatio(out[row * outStride + col], expected, bound));
      EXPECT_NEAR(out[row * outStride + col], expected, bound)
          << "row " << row << " col " << col;
    }
    // The gap between rows stays untouched.
    for (int64_t col = cols; col < outStride && row + 1 < rows; ++col)
      EXPECT_EQ(out[row * outStride + col], -7.0f);
  }
  std::printf("%s path, RMSNorm of %lld columns: largest error %.3g of its "
              "bound\n",
              isaLevelName(isaLevel()), (long long)cols, largestRatio);
}

TEST(CpuRmsNorm, MatchesDoublePrecisionReferenceWithStrides) {
  checkRmsNorm(576);
  checkRmsNorm(581); // past the last whole vector on every path
}

TEST(CpuSwiGlu, IsSiluOfGateTimesUp) {
  const int64_t rows = 3, cols = 1541; // a tail past the vectors
  std::vector<float> fused = randomVector(rows * 2 * cols, 3, 4.0f);
  std::vector<float> out(rows * cols);
  RowShape shape{rows, cols, 2 * cols, cols};
  swiGlu(shape, fused.data(), fused.data() + cols, out.data());
  double largestRatio = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < cols; ++col) {
      double gate = fused[row * 2 * cols + col];
      double up = fused[row * 2 * cols + cols + col];
      double expected = gate / (1.0 + std::exp(-gate)) * up;
      const double bound = kSwiGluError * std::abs(expected);
      largestRatio = std::max(
          largestRatio, errorRatio(out[row * cols + col], expected, bound));
      EXPECT_NEAR(out[row * cols + col], expected, bound)
          << "gate " << gate << " up " << up;
    }
  std::printf("%s path, SwiGLU: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()), largestRatio);
}

TEST(CpuAddInPlace, AddsTheResidual) {
  std::vector<float> x = randomVector(2 * 10, 4), y = randomVector(2 * 10, 5);
  std::vector<float> expected = x;
  for (size_t i = 0; i < x.size(); ++i)
    expected[i] += y[i];
  addInPlace(RowShape{2, 10, 10, 10}, x.data(), y.data());
  EXPECT_EQ(x, expected);
}

TEST(CpuAddBias, AddsTheBiasToABlockOfColumnsOfEachRow) {
  // Columns 2..7 of 3 rows 12 floats apart; the rest stays as it was.
  const int64_t rows = 3, stride = 12, first = 2, cols = 6;
  std::vector<float> x = randomVector(size_t(rows * stride), 6);
  const std::vector<float> bias = randomVector(size_t(stride), 7);
  std::vector<float> expected = x;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = first; col < first + cols; ++col)
      expected[size_t(row * stride + col)] += bias[size_t(col)];
  addBias(RowShape{rows, cols, stride, stride}, x.data() + first,
          bias.data() + first);
  EXPECT_EQ(x, expected);
}

/// A toy 2-bit decoder that proves the table's decoder and row stride are
/// used, not just memcpy of f32 rows.
void decodeNibbles(const void *row, float *out, int64_t count,
                   const void *context) {
  const uint8_t *bytes = static_cast<const uint8_t *>(row);
  float scale = *static_cast<const float *>(context);
  for (int64_t i = 0; i < count; ++i)
    out[i] = float((bytes[i / 2] >> (4 * (i % 2))) & 0xf) * scale;
}

TEST(CpuEmbeddingLookup, GathersDecodedRowsByTokenId) {
  const int64_t numRows = 7, dim = 6, rowBytes = 4; // 3 bytes used + 1 pad
  std::vector<uint8_t> table(numRows * rowBytes);
  for (size_t i = 0; i < table.size(); ++i)
    table[i] = uint8_t(i * 37 + 11);
  float scale = 0.5f;
  EmbeddingTable embedding{table.data(), numRows,       dim,
                           rowBytes,     decodeNibbles, &scale};
  std::vector<int32_t> ids = {3, 0, 6, 3};
  const int64_t stride = 8;
  std::vector<float> out(ids.size() * stride, -1.0f);
  embeddingLookup(embedding, ids.data(), int64_t(ids.size()), out.data(),
                  stride);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t col = 0; col < dim; ++col) {
      uint8_t byte = table[size_t(ids[i] * rowBytes + col / 2)];
      EXPECT_EQ(out[i * stride + col],
                float((byte >> (4 * (col % 2))) & 0xf) * 0.5f);
    }

  std::vector<float> floats = randomVector(numRows * dim, 6);
  EmbeddingTable f32Table{reinterpret_cast<const uint8_t *>(floats.data()),
                          numRows,
                          dim,
                          int64_t(dim * sizeof(float)),
                          decodeF32Row,
                          nullptr};
  std::vector<float> gathered(ids.size() * dim);
  embeddingLookup(f32Table, ids.data(), int64_t(ids.size()), gathered.data(),
                  dim);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t col = 0; col < dim; ++col)
      EXPECT_EQ(gathered[i * dim + col], floats[ids[i] * dim + col]);
}

} // namespace
