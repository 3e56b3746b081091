//===- QuantGemvTest.cpp - 4/8-bit GGUF GEMV against dequantized math -----===//
//
// Every path runs the same operations in the same order (the integer dots
// are exact), so one bound holds on all of them: checkGemv's, derived from
// the f32 fold of the blocks and, against the unquantized product, from the
// int8 activation quantization.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/QuantGemv.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "test/unit/kernels/ErrorBounds.h"
#include "test/unit/kernels/QuantTestMatrix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;
using namespace spanc::test;

/// Checks quantGemv against two references and returns the largest error's
/// share of its bound over both.
///
/// Against the dequantized weights times the dequantized activations: the
/// kernel folds 1 (Q8_0) or 2 (Q4_1) terms per block of 32 into an f32
/// accumulator with fused multiply-adds, each block's term dot * (dw * da)
/// from an exact integer dot and one rounding of dw * da. That is an f32
/// sum of `terms` terms, each off by u: (lambda sqrt(terms) + 1) u of the
/// terms' magnitude, which sum |w_i a_i| + sum |m_b| |s_b| bounds (a Q4_1
/// weight is d q + m, so |d q a| <= |w a| + |m a|: the minimum's share is
/// counted with its activations, sum |m_b| (|s_b| + sum |a_i|)). The
/// reference's weights are f32 (d q + m rounded once): u of sum |w_i a_i|.
///
/// Against the unquantized activations x, the quantization adds its own
/// error. An activation a_i = q_i d' with q_i = round(x_i 127 / max) and
/// d' = f16(max / 127): q_i's rounding moves a_i by at most d / 2 (d =
/// max / 127), independently of the other elements and with mean zero,
/// so sum_i w_i (q_i - x_i / d) d is held probabilistically to
/// lambda sqrt(sum_i (w_i d_b / 2)^2) (Hoeffding, as Higham and Mary
/// argue); the f16 scale is shared by a block: 2^-11 (and u for max / 127)
/// of the block's |sum_i w_i a_i|, worst case. Q4_1's stored sum s (f16)
/// multiplies the minimum instead of sum a_i: 2^-11 |m_b s_b| more.
double checkGemv(QuantFormat format, int64_t rows, int64_t columns,
                 int64_t activationRows) {
  double largestRatio = 0;
  TestMatrix matrix = makeMatrix(format, rows, columns, 5);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const int64_t stride = columns + 8;
  std::vector<float> x(size_t(activationRows * stride));
  for (float &value : x)
    value = normal(rng);
  QuantizedActivations quantized;
  quantizeActivations(x.data(), activationRows, columns, stride, format,
                      quantized);
  const int64_t outputStride = rows + 3;
  std::vector<float> fast(size_t(activationRows * outputStride), 0.0f),
      scalar = fast;
  PackedQuantMatrix packed = packQuantMatrix(matrix.view);
  quantGemv(packed, quantized, fast.data(), outputStride);
  quantGemv(packed, quantized, scalar.data(), outputStride, true);
  const int64_t blocks = columns / 32;
  const int64_t terms = format == QuantFormat::Q4_1 ? 2 * blocks : blocks;
  for (int64_t r = 0; r < activationRows; ++r)
    for (int64_t row = 0; row < rows; ++row) {
      // The dequantized weights times the dequantized activations.
      double expected = 0, exact = 0, magnitude = 0;
      double quantizedMagnitude = 0, roundingSquares = 0, scaleError = 0;
      for (int64_t block = 0; block < blocks; ++block) {
        const double scale =
            quantized.scales[size_t(r * quantized.blocks + block)];
        double maximum = 0;
        for (int i = 0; i < 32; ++i)
          maximum = std::max(
              maximum,
              std::abs(double(x[size_t(r * stride + block * 32 + i)])));
        const double step = maximum / 127; // d, before its f16 rounding
        double blockDot = 0, activationMagnitude = 0;
        for (int i = 0; i < 32; ++i) {
          const int64_t col = block * 32 + i;
          const double weight = matrix.dequantized[size_t(row * columns + col)];
          const double activation = double(quantized.value(r, col)) * scale;
          expected += weight * activation;
          blockDot += weight * activation;
          quantizedMagnitude += std::abs(weight * activation);
          activationMagnitude += std::abs(activation);
          exact += weight * x[size_t(r * stride + col)];
          magnitude += std::abs(weight * x[size_t(r * stride + col)]);
          roundingSquares += (weight * step / 2) * (weight * step / 2);
        }
        scaleError += (kHalfRoundoff + kUnitRoundoff) * std::abs(blockDot);
        if (format == QuantFormat::Q4_1) {
          // Q4_1's minimum multiplies the block's sum as ggml stores it
          // (f16), not the exact sum of the dequantized activations.
          const double minimum = matrix.minimums[size_t(row * blocks + block)];
          double exactSum = 0;
          for (int i = 0; i < 32; ++i)
            exactSum += double(quantized.value(r, block * 32 + i)) * scale;
          const double storedSum =
              quantized.scaledSums[size_t(r * quantized.blocks + block)];
          expected += minimum * (storedSum - exactSum);
          quantizedMagnitude +=
              std::abs(minimum) * (std::abs(storedSum) + activationMagnitude);
          scaleError += kHalfRoundoff * std::abs(minimum * storedSum);
        }
      }
      const double foldBound =
          (f32SumError(terms) + kUnitRoundoff) * quantizedMagnitude +
          kUnitRoundoff * quantizedMagnitude; // the reference's f32 weights
      const double quantizationBound =
          kLambda * std::sqrt(roundingSquares) + scaleError;
      const float got = fast[size_t(r * outputStride + row)];
      const double foldError = std::abs(got - expected);
      const double exactError = std::abs(got - exact);
      largestRatio = std::max({largestRatio, foldError / foldBound,
                               exactError / (foldBound + quantizationBound)});
      EXPECT_LE(foldError, foldBound)
          << "activation row " << r << " weight row " << row;
      // Both paths fold the same operations in the same order.
      EXPECT_EQ(scalar[size_t(r * outputStride + row)], got)
          << "activation row " << r << " weight row " << row;
      // int8 activations: the quantization's bound, a fraction of a percent
      // of the terms' magnitude.
      EXPECT_LE(exactError, foldBound + quantizationBound)
          << "activation row " << r << " weight row " << row << " (bound "
          << (foldBound + quantizationBound) / magnitude
          << " of the terms' magnitude)";
      if (foldError > foldBound || exactError > foldBound + quantizationBound)
        return largestRatio;
    }
  std::printf("%s path, %s %lldx%lld: largest error %.3g of its bound\n",
              isaLevelName(isaLevel()),
              format == QuantFormat::Q4_1 ? "Q4_1" : "Q8_0", (long long)rows,
              (long long)columns, largestRatio);
  return largestRatio;
}

TEST(QuantGemv, Q4_1MatchesDequantizedProduct) {
  checkGemv(QuantFormat::Q4_1, 70, 576, 1);
  checkGemv(QuantFormat::Q4_1, 33, 1536, 3);
  checkGemv(QuantFormat::Q4_1, 20, 576, 6); // a full tile and a remainder
}

TEST(QuantGemv, Q8_0MatchesDequantizedProduct) {
  checkGemv(QuantFormat::Q8_0, 70, 576, 1);
  checkGemv(QuantFormat::Q8_0, 41, 256, 5);
}

TEST(QuantGemv, OddBlockCountsWork) {
  checkGemv(QuantFormat::Q4_1, 9, 96, 2);
  checkGemv(QuantFormat::Q8_0, 9, 32, 1);
}

/// llama.cpp's AMX/VNNI kernels fold each output's blocks in order:
/// acc = fma(dot, dw * da, acc), then for Q4_1 acc = fma(mw, sa, acc).
/// Computed here from the GGUF blocks themselves; the packed kernel must
/// give the same bits (on any row count, with stacked parts).
void checkLlamaCppFold(QuantFormat format, int64_t rows, int64_t columns,
                       int64_t activationRows) {
  TestMatrix top = makeMatrix(format, rows / 2, columns, 7);
  TestMatrix bottom = makeMatrix(format, rows - rows / 2, columns, 8);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(activationRows * columns));
  for (float &value : x)
    value = normal(rng);
  QuantizedActivations quantized;
  quantizeActivations(x.data(), activationRows, columns, columns, format,
                      quantized);
  QuantMatrix parts[] = {top.view, bottom.view};
  PackedQuantMatrix packed = packQuantMatrices(parts, 2);
  ASSERT_EQ(packed.rows, rows);
  std::vector<float> y(size_t(activationRows * rows));
  quantGemv(packed, quantized, y.data(), rows);
  const int64_t blocks = columns / 32, blockBytes = quantBlockBytes(format);
  for (int64_t r = 0; r < activationRows; ++r)
    for (int64_t row = 0; row < rows; ++row) {
      const TestMatrix &source = row < rows / 2 ? top : bottom;
      const int64_t sourceRow = row < rows / 2 ? row : row - rows / 2;
      float accumulator = 0.0f;
      for (int64_t block = 0; block < blocks; ++block) {
        const uint8_t *data =
            source.bytes.data() + (sourceRow * blocks + block) * blockBytes;
        uint16_t bits;
        std::memcpy(&bits, data, 2);
        float scale = halfValue(bits);
        int32_t dot = 0;
        for (int i = 0; i < 32; ++i) {
          int32_t weight =
              format == QuantFormat::Q4_1
                  ? (i < 16 ? data[4 + i] & 0xf : data[4 + i - 16] >> 4)
                  : int8_t(data[2 + i]);
          dot += weight * quantized.value(r, block * 32 + i);
        }
        const size_t index = size_t(r * blocks + block);
        accumulator =
            std::fma(float(dot), scale * quantized.scales[index], accumulator);
        if (format == QuantFormat::Q4_1) {
          std::memcpy(&bits, data + 2, 2);
          accumulator = std::fma(halfValue(bits), quantized.scaledSums[index],
                                 accumulator);
        }
      }
      ASSERT_EQ(y[size_t(r * rows + row)], accumulator)
          << "activation row " << r << " weight row " << row;
    }
}

TEST(QuantGemv, FoldsBlocksInLlamaCppOrderBitForBit) {
  checkLlamaCppFold(QuantFormat::Q4_1, 40, 576, 1);
  checkLlamaCppFold(QuantFormat::Q4_1, 35, 1536, 6);
  checkLlamaCppFold(QuantFormat::Q8_0, 48, 576, 1);
  checkLlamaCppFold(QuantFormat::Q8_0, 19, 256, 5);
}

/// quantGemv on the host's path against the portable path, bit for bit.
void expectPathsAgree(const PackedQuantMatrix &packed,
                      const QuantizedActivations &quantized) {
  std::vector<float> fast(size_t(quantized.rows * packed.rows)),
      portable(fast.size());
  quantGemv(packed, quantized, fast.data(), packed.rows);
  quantGemv(packed, quantized, portable.data(), packed.rows, true);
  for (size_t i = 0; i < fast.size(); ++i)
    ASSERT_EQ(fast[i], portable[i]) << "output " << i;
}

TEST(QuantGemv, ExtremeValuesStayExactOnEveryPath) {
  // The largest integer dots each format allows: every Q4_1 nibble 15,
  // Q8_0 weights of +-127, activations at +-127 and -128 (a NaN's
  // saturated value). The AVX2 kernel sums them in 16-bit lanes
  // (QuantGemvAvx2.cpp), which must not saturate.
  // Six activation rows: four through the AVX2 four-row kernel
  // (QuantGemmAvx2.cpp), two through the GEMV.
  const int64_t rows = 19, columns = 128, activationRows = 6;
  std::vector<float> x(size_t(activationRows * columns));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < columns; ++i) {
    x[size_t(i)] = 3.0f;                           // all +127
    x[size_t(columns + i)] = i % 2 ? -3.0f : 3.0f; // +-127
    x[size_t(2 * columns + i)] = -3.0f;            // all -127
    x[size_t(3 * columns + i)] = -3.0f;            // all -127
    x[size_t(4 * columns + i)] = i % 2 ? 3.0f : -3.0f;
    x[size_t(5 * columns + i)] = 3.0f;
  }
  // A NaN in rows 1 and 2 (a -128; NaN-heavy blocks' scales differ between the
  // quantizers, which this test is not about).
  x[size_t(columns + 5)] = nan;
  x[size_t(2 * columns + 9)] = nan;
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    TestMatrix matrix = makeMatrix(format, rows, columns, 21);
    const int64_t blockBytes = quantBlockBytes(format);
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t block = 0; block < columns / 32; ++block) {
        uint8_t *data =
            matrix.bytes.data() + (row * columns / 32 + block) * blockBytes;
        for (int i = 0; i < 32; ++i)
          if (format == QuantFormat::Q4_1)
            data[4 + i % 16] = row % 2 ? 0xff : 0xf0;
          else
            data[2 + i] = uint8_t(int8_t(row % 3 == 0   ? 127
                                         : row % 3 == 1 ? -127
                                         : i % 2        ? 127
                                                        : -127));
      }
    QuantizedActivations quantized;
    quantizeActivations(x.data(), activationRows, columns, columns, format,
                        quantized);
    EXPECT_EQ(quantized.value(0, 0), 127);
    EXPECT_EQ(quantized.value(1, 5), -128);
    EXPECT_EQ(quantized.value(2, 9), -128);
    PackedQuantMatrix packed = packQuantMatrix(matrix.view);
    EXPECT_FALSE(packed.hasLowestQ80Value);
    expectPathsAgree(packed, quantized);
  }
}

TEST(QuantGemv, AQ80WeightOfMinus128IsMultipliedExactly) {
  // GGUF quantizers never write -128, but a file may hold it: the AVX2
  // kernel's sign trick cannot negate it, so such a matrix is marked and
  // takes the portable path there; every path gives the same bits.
  TestMatrix matrix = makeMatrix(QuantFormat::Q8_0, 21, 96, 22);
  matrix.bytes[2 + 7] = 0x80;
  matrix.bytes[5 * 3 * 34 + 34 + 2 + 30] = 0x80;
  PackedQuantMatrix packed = packQuantMatrix(matrix.view);
  EXPECT_TRUE(packed.hasLowestQ80Value);
  std::vector<float> x(size_t(96), -1.0f);
  x[7] = std::numeric_limits<float>::quiet_NaN(); // -128 times -128
  QuantizedActivations quantized;
  quantizeActivations(x.data(), 1, 96, 96, QuantFormat::Q8_0, quantized);
  expectPathsAgree(packed, quantized);
  EXPECT_FALSE(packQuantMatrix(makeMatrix(QuantFormat::Q8_0, 21, 96, 22).view)
                   .hasLowestQ80Value);
}

TEST(QuantGemv, ActivationQuantizationKeepsSumsAndScales) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i)
    x[size_t(i)] = float(i - 20) * 0.25f;
  QuantizedActivations quantized;
  quantizeActivations(x.data(), 1, 64, 64, QuantFormat::Q4_1, quantized);
  ASSERT_EQ(quantized.scales.size(), 2u);
  EXPECT_FLOAT_EQ(quantized.scales[0], roundToHalf(5.0f / 127)); // max 5
  EXPECT_FLOAT_EQ(quantized.scales[1], roundToHalf(10.75f / 127));
  for (int half = 0; half < 2; ++half) {
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      int8_t value = quantized.value(0, half * 32 + i);
      sum += value;
      // Half a step from rounding to an integer, and the scale's f16
      // rounding times at most 127 steps: |q| 2^-11 d.
      EXPECT_NEAR(
          value * quantized.scales[size_t(half)], x[size_t(half * 32 + i)],
          quantized.scales[size_t(half)] *
              (0.5 + std::abs(value) * (kHalfRoundoff + kUnitRoundoff)));
    }
    float maximum = half == 0 ? 5.0f : 10.75f;
    EXPECT_FLOAT_EQ(quantized.scaledSums[size_t(half)],
                    roundToHalf(float(sum) * (maximum / 127)));
  }
}

TEST(QuantGemv, VectorAndScalarQuantizationAgreeBitForBit) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t columns = 256;
  std::vector<float> x(size_t(3 * columns));
  for (float &value : x)
    value = normal(rng);
  for (int i = 0; i < 32; ++i) // a zero block
    x[size_t(32 + i)] = 0.0f;
  for (int i = 0; i < 32; ++i) // exact halves after scaling: ties to even
    x[size_t(64 + i)] = float(i - 16) * 0.5f + (i == 0 ? 0.0f : 0.0f);
  x[size_t(64 + 31)] = 127.0f; // max 127: scaled values are x * 1
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    QuantizedActivations fast, scalar;
    quantizeActivations(x.data(), 3, columns, columns, format, fast);
    quantizeActivations(x.data(), 3, columns, columns, format, scalar, true);
    EXPECT_EQ(fast.values, scalar.values);
    EXPECT_EQ(fast.scales, scalar.scales);
    EXPECT_EQ(fast.scaledSums, scalar.scaledSums);
    EXPECT_EQ(scalar.value(0, 64 + 1), -8); // -7.5 rounds to even
    EXPECT_EQ(scalar.value(0, 64 + 3), -6); // -6.5 too
  }
}

TEST(QuantGemv, NonFiniteActivationsSaturateAndKeepSumsSmall) {
  // A broken model (found by the Model::load fuzz target) feeds NaN and
  // infinities: the blocks must still hold int8 values whose sums match
  // them (quantGemv multiplies a sum by 128 in int32), on both paths.
  const int64_t columns = 128;
  std::vector<float> x(size_t(columns), 1.5f);
  for (int i = 0; i < 32; ++i)
    x[size_t(i)] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[70] = -std::numeric_limits<float>::infinity();
  x[100] = std::numeric_limits<float>::quiet_NaN();
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    QuantizedActivations fast, scalar;
    quantizeActivations(x.data(), 1, columns, columns, format, fast);
    quantizeActivations(x.data(), 1, columns, columns, format, scalar, true);
    EXPECT_EQ(fast.values, scalar.values);
    EXPECT_EQ(fast.sums, scalar.sums);
    for (int64_t block = 0; block < columns / 32; ++block) {
      int32_t sum = 0;
      for (int64_t i = 0; i < 32; ++i)
        sum += scalar.value(0, block * 32 + i);
      EXPECT_EQ(scalar.sums[size_t(block)], sum) << "block " << block;
      EXPECT_LE(std::abs(sum), 32 * 128);
    }
    EXPECT_EQ(scalar.value(0, 0), -128); // NaN saturates low
  }
}

TEST(QuantGemv, GroupRangesAndBlockRangesComposeToTheWhole) {
  // Splitting a product by groups of 16 rows, and a quantization by
  // blocks, between callers gives the bits of the whole call.
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    TestMatrix matrix = makeMatrix(format, 100, 192, 12);
    PackedQuantMatrix packed = packQuantMatrix(matrix.view);
    std::mt19937 rng(13);
    std::normal_distribution<float> normal;
    std::vector<float> x(size_t(2 * 192));
    for (float &value : x)
      value = normal(rng);
    QuantizedActivations whole, pieces;
    quantizeActivations(x.data(), 2, 192, 192, format, whole);
    prepareActivations(2, 192, format, pieces);
    quantizeActivationBlocks(x.data(), 192, 4, 6, pieces);
    quantizeActivationBlocks(x.data(), 192, 0, 4, pieces);
    EXPECT_EQ(pieces.values, whole.values);
    EXPECT_EQ(pieces.scales, whole.scales);
    EXPECT_EQ(pieces.scaledSums, whole.scaledSums);
    std::vector<float> expected(size_t(2 * 100)), split(expected.size());
    quantGemv(packed, whole, expected.data(), 100);
    quantGemvGroups(packed, pieces, split.data(), 100, 3, packed.groups);
    quantGemvGroups(packed, pieces, split.data(), 100, 0, 3);
    EXPECT_EQ(split, expected);
  }
}

TEST(QuantGemv, EveryRowHasItsOwnBitsWhateverTheRowCount) {
  // A prompt's rows (four at a time on AVX2: QuantGemmAvx2.cpp, the rest
  // through the GEMV) each give the bits that row gives alone, as a decode
  // row: a span hit's rows and a miss's agree, whatever the batch. 35
  // weight rows leave a group of 3 valid lanes; a prompt of 70 rows is
  // quantized by both threads.
  for (QuantFormat format : {QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    TestMatrix matrix = makeMatrix(format, 35, 576, 14);
    PackedQuantMatrix packed = packQuantMatrix(matrix.view);
    std::mt19937 rng(15);
    std::normal_distribution<float> normal;
    const int64_t maxRows = 70, columns = 576;
    std::vector<float> x(size_t(maxRows * columns));
    for (float &value : x)
      value = normal(rng);
    QuantizedActivations all, serial;
    quantizeActivations(x.data(), maxRows, columns, columns, format, all);
    prepareActivations(maxRows, columns, format, serial);
    quantizeActivationBlocks(x.data(), columns, 0, columns / 32, serial);
    EXPECT_EQ(all.values, serial.values);
    EXPECT_EQ(all.scales, serial.scales);
    EXPECT_EQ(all.scaledSums, serial.scaledSums);
    std::vector<float> alone(size_t(maxRows * 35));
    QuantizedActivations one;
    for (int64_t row = 0; row < maxRows; ++row) {
      quantizeActivations(x.data() + row * columns, 1, columns, columns, format,
                          one);
      quantGemv(packed, one, alone.data() + row * 35, 35);
    }
    for (int64_t count : {4, 5, 7, 8, 13, 70}) {
      QuantizedActivations batch;
      quantizeActivations(x.data(), count, columns, columns, format, batch);
      std::vector<float> y(size_t(count * 35));
      quantGemv(packed, batch, y.data(), 35);
      for (int64_t i = 0; i < count * 35; ++i)
        ASSERT_EQ(y[size_t(i)], alone[size_t(i)])
            << count << " rows: row " << i / 35 << ", output " << i % 35;
      expectPathsAgree(packed, batch);
    }
  }
}

TEST(QuantGemv, RoundToHalfMatchesF16Values) {
  EXPECT_EQ(roundToHalf(1.0f), 1.0f);
  EXPECT_EQ(roundToHalf(1.0f + 1.0f / 4096), 1.0f); // below half ulp
  EXPECT_EQ(roundToHalf(1.0f + 3.0f / 2048), 1.0f + 1.0f / 512); // tie: even
  EXPECT_EQ(roundToHalf(-3.14159265f), -3.140625f);
  EXPECT_EQ(roundToHalf(70000.0f), INFINITY);
  EXPECT_EQ(roundToHalf(1e-7f), std::ldexp(1.0f, -24) * 2); // subnormal grid
  EXPECT_EQ(roundToHalf(0.0f), 0.0f);
}

} // namespace
