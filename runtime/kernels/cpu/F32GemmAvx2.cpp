//===- F32GemmAvx2.cpp - The f32 GEMM's AVX2+FMA micro-kernel -------------===//
//
// Six rows (or one) x 16 columns of y: per row two 8-wide sums, each the
// FMA chain over K in order (F32Gemm.h says why); and the unpacking of a
// borrowed panel from its 4/8-bit tiles. Built for AVX2+FMA(+F16C) by
// target attributes; F32Gemm.cpp calls them only where the CPU (under its
// cap) has them.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/F32Gemm.h"

#include <immintrin.h>

namespace spanc::cpu::f32gemm {

namespace {

#define SPANC_AVX2_FMA __attribute__((target("avx2,fma")))

/// Writes one row's 16 sums to the first `columns` columns of out.
SPANC_AVX2_FMA inline void writeRow(__m256 low, __m256 high, float *out,
                                    int columns, bool accumulate) {
  if (columns == kF32PanelColumns) {
    if (accumulate) {
      low = _mm256_add_ps(_mm256_loadu_ps(out), low);
      high = _mm256_add_ps(_mm256_loadu_ps(out + 8), high);
    }
    _mm256_storeu_ps(out, low);
    _mm256_storeu_ps(out + 8, high);
    return;
  }
  alignas(32) float lanes[kF32PanelColumns];
  _mm256_store_ps(lanes, low);
  _mm256_store_ps(lanes + 8, high);
  writeColumns(lanes, out, columns, accumulate);
}

/// Six rows, their twelve sums named: kept as arrays indexed by row, GCC
/// 12 at -O3 stored every sum to the stack in every step of the K loop.
SPANC_AVX2_FMA void sixRows(const float *x, int64_t xStride, const float *panel,
                            int64_t depth, float *y, int64_t yStride,
                            int columns, bool accumulate) {
  __m256 low0 = _mm256_setzero_ps(), high0 = low0, low1 = low0, high1 = low0,
         low2 = low0, high2 = low0, low3 = low0, high3 = low0, low4 = low0,
         high4 = low0, low5 = low0, high5 = low0;
  const float *x0 = x, *x1 = x0 + xStride, *x2 = x1 + xStride,
              *x3 = x2 + xStride, *x4 = x3 + xStride, *x5 = x4 + xStride;
  for (int64_t k = 0; k < depth; ++k) {
    const __m256 weightsLow = _mm256_load_ps(panel + k * kF32PanelColumns);
    const __m256 weightsHigh = _mm256_load_ps(panel + k * kF32PanelColumns + 8);
    __m256 value = _mm256_broadcast_ss(x0 + k);
    low0 = _mm256_fmadd_ps(value, weightsLow, low0);
    high0 = _mm256_fmadd_ps(value, weightsHigh, high0);
    value = _mm256_broadcast_ss(x1 + k);
    low1 = _mm256_fmadd_ps(value, weightsLow, low1);
    high1 = _mm256_fmadd_ps(value, weightsHigh, high1);
    value = _mm256_broadcast_ss(x2 + k);
    low2 = _mm256_fmadd_ps(value, weightsLow, low2);
    high2 = _mm256_fmadd_ps(value, weightsHigh, high2);
    value = _mm256_broadcast_ss(x3 + k);
    low3 = _mm256_fmadd_ps(value, weightsLow, low3);
    high3 = _mm256_fmadd_ps(value, weightsHigh, high3);
    value = _mm256_broadcast_ss(x4 + k);
    low4 = _mm256_fmadd_ps(value, weightsLow, low4);
    high4 = _mm256_fmadd_ps(value, weightsHigh, high4);
    value = _mm256_broadcast_ss(x5 + k);
    low5 = _mm256_fmadd_ps(value, weightsLow, low5);
    high5 = _mm256_fmadd_ps(value, weightsHigh, high5);
  }
  writeRow(low0, high0, y, columns, accumulate);
  writeRow(low1, high1, y + yStride, columns, accumulate);
  writeRow(low2, high2, y + 2 * yStride, columns, accumulate);
  writeRow(low3, high3, y + 3 * yStride, columns, accumulate);
  writeRow(low4, high4, y + 4 * yStride, columns, accumulate);
  writeRow(low5, high5, y + 5 * yStride, columns, accumulate);
}

/// One row: the same chain of FMAs as each row of sixRows.
SPANC_AVX2_FMA void oneRow(const float *x, const float *panel, int64_t depth,
                           float *y, int columns, bool accumulate) {
  __m256 low = _mm256_setzero_ps(), high = low;
  for (int64_t k = 0; k < depth; ++k) {
    const __m256 value = _mm256_broadcast_ss(x + k);
    low = _mm256_fmadd_ps(value, _mm256_load_ps(panel + k * kF32PanelColumns),
                          low);
    high = _mm256_fmadd_ps(
        value, _mm256_load_ps(panel + k * kF32PanelColumns + 8), high);
  }
  writeRow(low, high, y, columns, accumulate);
}

} // namespace

/// A tile of 16 rows x 32 values (QuantGemv.h's layout: lane j of each
/// 64-byte vector holds 4 or 8 consecutive values of row j) becomes 32
/// panel rows of 16 floats; each 256-bit load covers 8 of the lanes.
__attribute__((target("avx2,fma,f16c"))) void
unpackPanelAvx2(const F32Panels &weights, int64_t panel, float *out) {
  using namespace quantlayout;
  const QuantFormat format = weights.quantFormat;
  const int64_t blocks = weights.columns / 32;
  for (int64_t block = 0; block < blocks; ++block) {
    const uint8_t *values =
        weights.quantBytes + valuesOffset(format, blocks, panel, block);
    const uint8_t *scales =
        weights.quantBytes + scalesOffset(format, blocks, panel, block);
    float *to = out + block * 32 * kF32PanelColumns;
    for (int half = 0; half < 2; ++half) {
      const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i *>(scales + 16 * half)));
      if (format == QuantFormat::Q4_1) {
        const __m256 minimum =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(
                values + kQ41Minimums + 16 * half)));
        const __m256i nibble = _mm256_set1_epi32(0xf);
        for (int p = 0; p < 4; ++p) {
          const __m256i packed = _mm256_loadu_si256(
              reinterpret_cast<const __m256i *>(values + 64 * p + 32 * half));
          // Value 8p + t: byte t % 4 of the lane, its high nibble from 4 on.
          for (int t = 0; t < 8; ++t) {
            const __m256i level = _mm256_and_si256(
                _mm256_srli_epi32(packed, 8 * (t % 4) + (t < 4 ? 0 : 4)),
                nibble);
            _mm256_store_ps(
                to + (8 * p + t) * kF32PanelColumns + 8 * half,
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(level), scale, minimum));
          }
        }
      } else {
        const __m256i byte = _mm256_set1_epi32(0xff);
        const __m256i offset = _mm256_set1_epi32(128);
        for (int v = 0; v < 8; ++v) {
          const __m256i packed = _mm256_loadu_si256(
              reinterpret_cast<const __m256i *>(values + 64 * v + 32 * half));
          // Value 4v + t: byte t of the lane, stored w + 128.
          for (int t = 0; t < 4; ++t) {
            const __m256i level = _mm256_sub_epi32(
                _mm256_and_si256(_mm256_srli_epi32(packed, 8 * t), byte),
                offset);
            _mm256_store_ps(to + (4 * v + t) * kF32PanelColumns + 8 * half,
                            _mm256_mul_ps(_mm256_cvtepi32_ps(level), scale));
          }
        }
      }
    }
  }
}

void panelRowsAvx2(const float *x, int64_t xStride, int rows,
                   const float *panel, int64_t depth, float *y, int64_t yStride,
                   int columns, bool accumulate) {
  if (rows == kF32GemmRowBlock)
    return sixRows(x, xStride, panel, depth, y, yStride, columns, accumulate);
  for (int row = 0; row < rows; ++row)
    oneRow(x + row * xStride, panel, depth, y + row * yStride, columns,
           accumulate);
}

} // namespace spanc::cpu::f32gemm
