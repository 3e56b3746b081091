//===- GemmTest.cpp - Weight GEMMs (AMX, oneDNN) against a double reference
//===//
//
// Each output is held to the bound its engine's arithmetic guarantees
// (gemmErrorBound): f32 products on every path without native bf16, bf16
// products (less accurate by design) where the engine multiplies in bf16.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Gemm.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "test/unit/kernels/ErrorBounds.h"
#include "test/unit/kernels/QuantTestMatrix.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

namespace {

using namespace spanc::cpu;
using namespace spanc::test;

/// The error bound of one output y = sum_i x_i w_i of an engine multiplying
/// in `precision` (engine.precision(): what it runs, not what was asked),
/// relative to sum_i |x_i w_i|:
///  - f32 (oneDNN on every path without native bf16): each product rounded
///    once, then an f32 sum of k terms, in whatever order oneDNN's blocking
///    takes: (lambda sqrt(k) + 1) u.
///  - bf16 (AVX-512-BF16 through oneDNN, or the AMX kernel), less accurate
///    by design: x and W are rounded to bf16, 2^-8 of each operand, so a
///    product is off by at most 2^-7 + 2^-16 of itself (worst case: every
///    term may round the same way); the product of two bf16 values is exact
///    in f32 and the f32 sum of k terms adds lambda sqrt(k) u.
double gemmErrorBound(GemmPrecision precision, int64_t k) {
  if (precision == GemmPrecision::F32)
    return f32SumError(k) + kUnitRoundoff;
  const double operands = 2 * kBf16Roundoff + kBf16Roundoff * kBf16Roundoff;
  return operands + f32SumError(k) * (1 + operands);
}

/// Checks every output of x * W^T against a double reference at
/// gemmErrorBound; returns the largest error's share of its bound.
double checkGemm(GemmPrecision precision, int64_t n, int64_t k,
                 std::vector<int64_t> ms, GemmKernel kernel = GemmKernel::Amx) {
  double largestRatio = 0;
  std::mt19937 rng(99);
  std::normal_distribution<float> normal;
  std::vector<float> weights(size_t(n * k));
  for (float &value : weights)
    value = normal(rng);
  GemmEngine engine(precision, kernel);
  const double relativeBound = gemmErrorBound(engine.precision(), k);
  auto packed = engine.packWeights(weights.data(), n, k);
  EXPECT_TRUE(bool(packed)) << llvm::toString(packed.takeError());
  if (!packed)
    return largestRatio;
  // Twice over the shapes: the second round reuses cached primitives.
  for (int round = 0; round < 2; ++round)
    for (int64_t m : ms) {
      std::vector<float> x(size_t(m * k)), y(size_t(m * n), 0.0f);
      for (float &value : x)
        value = normal(rng);
      EXPECT_FALSE(bool(engine.multiply(*packed, x.data(), m, y.data())));
      for (int64_t row = 0; row < m; ++row)
        for (int64_t col = 0; col < n; ++col) {
          double expected = 0, magnitude = 0;
          for (int64_t i = 0; i < k; ++i) {
            double term =
                double(x[size_t(row * k + i)]) * weights[size_t(col * k + i)];
            expected += term;
            magnitude += std::abs(term);
          }
          const double bound = relativeBound * magnitude;
          const double error = std::abs(y[size_t(row * n + col)] - expected);
          largestRatio = std::max(largestRatio, error / bound);
          EXPECT_LE(error, bound)
              << "m " << m << " row " << row << " col " << col << " ("
              << isaLevelName(isaLevel()) << ", "
              << gemmKernelName(engine.kernel()) << ", "
              << gemmPrecisionName(engine.precision()) << " products)";
          if (error > bound)
            return largestRatio;
        }
    }
  std::printf("%s path, %s %s GEMM %lldx%lld: largest error %.3g of its "
              "bound\n",
              isaLevelName(isaLevel()), gemmKernelName(engine.kernel()),
              gemmPrecisionName(engine.precision()), (long long)n, (long long)k,
              largestRatio);
  return largestRatio;
}

TEST(CpuGemm, F32MatchesReferenceForDecodeAndPrefillShapes) {
  checkGemm(GemmPrecision::F32, 192, 576, {1, 3, 17, 300});
}

TEST(CpuGemm, Bf16MatchesReferenceWithinBf16Rounding) {
  if (!cpuFeatures().hasNativeBf16())
    GTEST_SKIP() << "no native bf16 on this CPU (" << cpuFeatures().describe()
                 << ")";
  EXPECT_EQ(defaultGemmPrecision(), GemmPrecision::Bf16);
  checkGemm(GemmPrecision::Bf16, 192, 576, {1, 2, 16, 257});
}

TEST(CpuGemm, OddShapesWork) {
  checkGemm(defaultGemmPrecision(), 37, 40, {1, 5});
}

TEST(CpuGemm, OneDnnKernelMatchesReference) {
  checkGemm(defaultGemmPrecision(), 96, 576, {1, 40}, GemmKernel::OneDnn);
}

/// The bf16 panel kernels this CPU (and kernel path) runs: AMX's and
/// AVX-512 BF16's, each asked for by name.
std::vector<GemmKernel> panelKernels() {
  std::vector<GemmKernel> kernels;
  for (GemmKernel kernel : {GemmKernel::Amx, GemmKernel::Avx512Bf16})
    if (GemmEngine(GemmPrecision::Bf16, kernel).kernel() == kernel)
      kernels.push_back(kernel);
  return kernels;
}

TEST(CpuGemm, PanelKernelsServeBf16WhereTheCpuHasThem) {
  const GemmKernel expected = cpuFeatures().amxBf16 ? GemmKernel::Amx
                              : cpuFeatures().avx512bf16
                                  ? GemmKernel::Avx512Bf16
                                  : GemmKernel::OneDnn;
  EXPECT_EQ(GemmEngine(GemmPrecision::Bf16).kernel(), expected);
  EXPECT_EQ(panelKernels().size(),
            size_t(cpuFeatures().amxBf16) + size_t(cpuFeatures().avx512bf16));
  // f32: oneDNN at AVX-512 (its brgemm), spanc's own below (F32Gemm.h).
  EXPECT_EQ(GemmEngine(GemmPrecision::F32).kernel(),
            isaLevel() >= IsaLevel::Avx512 ? GemmKernel::OneDnn
                                           : GemmKernel::F32);
  EXPECT_EQ(GemmEngine(GemmPrecision::F32, GemmKernel::OneDnn).kernel(),
            GemmKernel::OneDnn);
  EXPECT_EQ(GemmEngine(GemmPrecision::Bf16, GemmKernel::OneDnn).kernel(),
            GemmKernel::OneDnn);
  for (GemmKernel kernel : panelKernels())
    EXPECT_TRUE(GemmEngine(GemmPrecision::Bf16, kernel).canBorrowQuantized())
        << gemmKernelName(kernel);
  // spanc's f32 kernel borrows where it unpacks with AVX2 (F32Gemm.h).
  EXPECT_EQ(GemmEngine(GemmPrecision::F32).canBorrowQuantized(),
            isaLevel() == IsaLevel::Avx2);
}

TEST(CpuGemm, PanelKernelsPadEveryDimension) {
  if (panelKernels().empty())
    GTEST_SKIP() << "no bf16 panel kernel on this CPU ("
                 << cpuFeatures().describe() << ")";
  for (GemmKernel kernel : panelKernels()) {
    // N, K and M off the 32-multiples the panels want, on both sides of
    // them, and off the AVX-512 kernel's blocks of 12 rows.
    checkGemm(GemmPrecision::Bf16, 16, 32, {1, 11, 12, 13, 31, 32, 33}, kernel);
    checkGemm(GemmPrecision::Bf16, 70, 100, {2, 24, 64, 95}, kernel);
    checkGemm(GemmPrecision::Bf16, 1, 7, {3}, kernel);
  }
}

// The span cache's hit = miss contract: a row's products must not depend on
// how many rows are multiplied with it or where it sits in the batch.
/// A row's products must not depend on how many rows share its multiply
/// (a span hit computes a prompt's tail in a few rows where the miss
/// computed it among hundreds; a bulk batches what a solo call runs
/// alone): the same bits for a probe row at several positions of batches
/// of many sizes as alone.
void checkRowsDoNotDependOnTheBatch(GemmEngine &engine, int64_t n, int64_t k) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> weights(static_cast<size_t>(n * k)),
      probe(static_cast<size_t>(k));
  for (float &value : weights)
    value = normal(rng);
  for (float &value : probe)
    value = normal(rng);
  auto packed = engine.packWeights(weights.data(), n, k);
  ASSERT_TRUE(bool(packed)) << llvm::toString(packed.takeError());
  std::vector<float> alone(static_cast<size_t>(n));
  ASSERT_FALSE(bool(engine.multiply(*packed, probe.data(), 1, alone.data())));
  for (int64_t m : {2, 3, 8, 15, 16, 17, 32, 33, 64, 215, 300, 512})
    for (int64_t position : {int64_t(0), m / 2, m - 1}) {
      std::vector<float> x(size_t(m * k)), y(size_t(m * n));
      for (float &value : x)
        value = normal(rng);
      std::copy(probe.begin(), probe.end(), x.begin() + position * k);
      ASSERT_FALSE(bool(engine.multiply(*packed, x.data(), m, y.data())));
      for (int64_t col = 0; col < n; ++col)
        ASSERT_EQ(y[size_t(position * n + col)], alone[size_t(col)])
            << "m " << m << " position " << position << " col " << col << " ("
            << gemmKernelName(engine.kernel()) << ", "
            << gemmPrecisionName(engine.precision()) << ", "
            << isaLevelName(isaLevel()) << " path)";
    }
}

TEST(CpuGemm, PanelKernelRowResultsDoNotDependOnTheBatch) {
  if (panelKernels().empty())
    GTEST_SKIP() << "no bf16 panel kernel on this CPU ("
                 << cpuFeatures().describe() << ")";
  for (GemmKernel kernel : panelKernels()) {
    GemmEngine engine(GemmPrecision::Bf16, kernel);
    checkRowsDoNotDependOnTheBatch(engine, 96, 1536);
  }
}

TEST(CpuGemm, RowResultsDoNotDependOnTheBatchOnEveryPath) {
  // The engine the model makes on this kernel path (bf16 or f32; AMX,
  // AVX-512 BF16, oneDNN, or spanc's f32 kernel below AVX-512), and f32
  // GEMMs (--batch-invariant) everywhere, at SmolLM2's widths (N: 96 a
  // head group, 960 QKV, 3 072 gate|up), on several thread counts: below
  // AVX-512 oneDNN's f32 GEMM summed a row in another order from ~300
  // rows of 3 072 columns on 2 threads, and from 8 rows on 16.
  std::vector<GemmPrecision> precisions = {defaultGemmPrecision()};
  if (precisions[0] != GemmPrecision::F32)
    precisions.push_back(GemmPrecision::F32);
  const int threadsBefore = omp_get_max_threads();
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    for (GemmPrecision precision : precisions)
      for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 576},
                          {96, 1536},
                          {960, 576},
                          {3072, 576}}) {
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, N " << n << ", K " << k);
        GemmEngine engine(precision);
        checkRowsDoNotDependOnTheBatch(engine, n, k);
      }
  }
  omp_set_num_threads(threadsBefore);
}

TEST(CpuGemm, Bf16ConversionRoundsToNearestEven) {
  std::vector<float> values = {1.0f, 1.00390625f /* tie: stays 1 */,
                               1.01171875f /* tie: rounds up */, -2.5f,
                               3.14159265f};
  for (int i = 0; i < 20; ++i)
    values.push_back(float(i) * 0.1f); // past the 16-wide vector path
  std::vector<uint16_t> bits(values.size());
  convertToBf16(values.data(), bits.data(), int64_t(values.size()));
  EXPECT_EQ(bits[0], 0x3f80);
  EXPECT_EQ(bits[1], 0x3f80);
  EXPECT_EQ(bits[2], 0x3f82);
  EXPECT_EQ(bits[3], 0xc020);
  EXPECT_EQ(bits[4], 0x4049);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t word = uint32_t(bits[i]) << 16;
    float back;
    std::memcpy(&back, &word, sizeof(back));
    // Round to nearest: within half a bf16 ulp, 2^-9 of the value.
    EXPECT_NEAR(back, values[i], kBf16Roundoff * std::abs(values[i])) << i;
  }
}

// multiplyGated's SwiGLU and multiply's Accumulate against the plain
// product and the elementwise kernels, for both kernels and for a gated
// width the AMX epilogue takes (rows % 32 == 0) and one it does not.
void checkEpilogues(GemmKernel kernel, int64_t ffn, int64_t k, int64_t m) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> gateUp(size_t(2 * ffn * k)), x(size_t(m * k));
  for (float &value : gateUp)
    value = normal(rng) * 0.1f;
  for (float &value : x)
    value = normal(rng);
  GemmEngine engine(defaultGemmPrecision(), kernel);
  auto gated = engine.packGatedWeights(gateUp.data(), 2 * ffn, k);
  ASSERT_TRUE(bool(gated)) << llvm::toString(gated.takeError());
  EXPECT_TRUE(gated->isGated());
  auto plain = engine.packWeights(gateUp.data(), 2 * ffn, k);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());

  std::vector<float> products(size_t(m * 2 * ffn)), expected(size_t(m * ffn)),
      h(size_t(m * ffn));
  ASSERT_FALSE(bool(engine.multiply(*plain, x.data(), m, products.data())));
  swiGlu(RowShape{m, ffn, 2 * ffn, ffn}, products.data(), products.data() + ffn,
         expected.data());
  ASSERT_FALSE(bool(engine.multiplyGated(*gated, x.data(), m, h.data())));
  for (size_t index = 0; index < h.size(); ++index)
    ASSERT_EQ(h[index], expected[index]) << "index " << index;

  // Accumulate adds the products to what y holds, as addInPlace would.
  std::vector<float> y(products.size()), sum(products.size());
  for (size_t index = 0; index < y.size(); ++index)
    sum[index] = y[index] = normal(rng);
  addInPlace(RowShape{m, 2 * ffn, 2 * ffn, 2 * ffn}, sum.data(),
             products.data());
  ASSERT_FALSE(bool(
      engine.multiply(*plain, x.data(), m, y.data(), GemmOutput::Accumulate)));
  for (size_t index = 0; index < y.size(); ++index)
    ASSERT_EQ(y[index], sum[index]) << "index " << index;
}

TEST(CpuGemm, EpiloguesMatchTheUnfusedOps) {
  for (GemmKernel kernel :
       {GemmKernel::Amx, GemmKernel::Avx512Bf16, GemmKernel::OneDnn}) {
    SCOPED_TRACE(gemmKernelName(kernel));
    checkEpilogues(kernel, 64, 96, 45);
    checkEpilogues(kernel, 24, 40, 7); // 48 rows: no AMX SwiGLU epilogue
  }
}

/// Borrowed 4/8-bit weights must multiply exactly as a bf16 (or f32) copy
/// of their dequantized values does: plain (Store and Accumulate) and
/// gated, for rows past the last whole panel and group, odd block counts
/// (unaligned Q8_0 tiles), and batches in one chunk of rows and across
/// chunks.
void checkBorrowedMatchesCopy(GemmKernel kernel, QuantFormat format, int64_t n,
                              int64_t k, bool gated,
                              GemmPrecision precision = GemmPrecision::Bf16) {
  SCOPED_TRACE(testing::Message()
               << gemmKernelName(kernel) << " "
               << (format == QuantFormat::Q4_1 ? "Q4_1" : "Q8_0") << " " << n
               << "x" << k << (gated ? " gated" : ""));
  GemmEngine engine(precision, kernel);
  ASSERT_EQ(engine.kernel(), kernel);
  TestMatrix matrix = makeMatrix(format, n, k, unsigned(n * 31 + k));
  PackedQuantMatrix quantized = packQuantMatrix(matrix.view);
  GemmWeights borrowed = engine.borrowQuantized(quantized, gated);
  auto copy = gated ? engine.packGatedWeights(matrix.dequantized.data(), n, k)
                    : engine.packWeights(matrix.dequantized.data(), n, k);
  ASSERT_TRUE(bool(copy)) << llvm::toString(copy.takeError());
  EXPECT_EQ(borrowed.sizeInBytes(), 0);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const int64_t width = gated ? n / 2 : n;
  for (int64_t m : {1, 17, 32, 300, 600}) {
    std::vector<float> x(size_t(m * k));
    for (float &value : x)
      value = normal(rng);
    std::vector<float> fromCopy(size_t(m * width)), fromBorrowed(fromCopy);
    for (size_t index = 0; index < fromCopy.size(); ++index)
      fromCopy[index] = fromBorrowed[index] = normal(rng);
    if (gated) {
      ASSERT_FALSE(
          bool(engine.multiplyGated(*copy, x.data(), m, fromCopy.data())));
      ASSERT_FALSE(bool(
          engine.multiplyGated(borrowed, x.data(), m, fromBorrowed.data())));
    } else {
      GemmOutput output = m % 2 ? GemmOutput::Accumulate : GemmOutput::Store;
      ASSERT_FALSE(
          bool(engine.multiply(*copy, x.data(), m, fromCopy.data(), output)));
      ASSERT_FALSE(bool(
          engine.multiply(borrowed, x.data(), m, fromBorrowed.data(), output)));
    }
    for (size_t index = 0; index < fromCopy.size(); ++index)
      ASSERT_EQ(fromBorrowed[index], fromCopy[index])
          << "m " << m << " row " << index / size_t(width) << " column "
          << index % size_t(width);
  }
}

TEST(CpuGemm, BorrowedQuantizedWeightsMultiplyAsTheirBf16Copy) {
  if (panelKernels().empty())
    GTEST_SKIP() << "no bf16 panel kernel on this path ("
                 << cpuFeatures().describe() << ", " << isaLevelName(isaLevel())
                 << ")";
  for (GemmKernel kernel : panelKernels())
    for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
      checkBorrowedMatchesCopy(kernel, format, 64, 576, false);
      // A partial group and panel.
      checkBorrowedMatchesCopy(kernel, format, 70, 96, false);
      checkBorrowedMatchesCopy(kernel, format, 16, 32, false); // half a panel
      checkBorrowedMatchesCopy(kernel, format, 128, 160, true);
      // SwiGLU after the GEMM.
      checkBorrowedMatchesCopy(kernel, format, 48, 64, true);
    }
}

TEST(CpuGemm, BorrowedQuantizedWeightsMultiplyAsTheirF32Copy) {
  if (!GemmEngine(GemmPrecision::F32).canBorrowQuantized())
    GTEST_SKIP() << "spanc's f32 kernel borrows on the avx2 path only (this: "
                 << isaLevelName(isaLevel()) << ")";
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    checkBorrowedMatchesCopy(GemmKernel::F32, format, 64, 576, false,
                             GemmPrecision::F32);
    checkBorrowedMatchesCopy(GemmKernel::F32, format, 70, 96, false,
                             GemmPrecision::F32);
    checkBorrowedMatchesCopy(GemmKernel::F32, format, 16, 32, false,
                             GemmPrecision::F32);
    checkBorrowedMatchesCopy(GemmKernel::F32, format, 48, 64, true,
                             GemmPrecision::F32);
  }
}

TEST(CpuGemm, GatedWeightsNeedAnEvenNumberOfRows) {
  std::vector<float> weights(3 * 8, 1.0f);
  GemmEngine engine;
  auto gated = engine.packGatedWeights(weights.data(), 3, 8);
  ASSERT_FALSE(bool(gated));
  EXPECT_NE(llvm::toString(gated.takeError()).find("even number of rows"),
            std::string::npos);
}

} // namespace
