//===- F32GemmAvx2.cpp - The f32 GEMM's AVX2+FMA micro-kernel -------------===//
//
// Rows x 16 columns of y: per row two 8-wide sums, each the FMA chain over
// K in order (F32Gemm.h says why). Built for AVX2+FMA by a target
// attribute; F32Gemm.cpp calls it only where the CPU (under its cap) has
// both.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/F32Gemm.h"

#include <immintrin.h>

namespace spanc::cpu::f32gemm {

namespace {

#define SPANC_AVX2_FMA __attribute__((target("avx2,fma")))

template <int Rows>
SPANC_AVX2_FMA void panelRows(const float *x, int64_t xStride,
                              const float *panel, int64_t depth, float *y,
                              int64_t yStride, int columns, bool accumulate) {
  __m256 sums[Rows][2];
  for (int row = 0; row < Rows; ++row)
    sums[row][0] = sums[row][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    const __m256 low = _mm256_load_ps(panel + k * kF32PanelColumns);
    const __m256 high = _mm256_load_ps(panel + k * kF32PanelColumns + 8);
    for (int row = 0; row < Rows; ++row) {
      const __m256 value = _mm256_broadcast_ss(x + row * xStride + k);
      sums[row][0] = _mm256_fmadd_ps(value, low, sums[row][0]);
      sums[row][1] = _mm256_fmadd_ps(value, high, sums[row][1]);
    }
  }
  for (int row = 0; row < Rows; ++row) {
    float *out = y + row * yStride;
    if (columns == kF32PanelColumns) {
      if (accumulate) {
        sums[row][0] = _mm256_add_ps(_mm256_loadu_ps(out), sums[row][0]);
        sums[row][1] = _mm256_add_ps(_mm256_loadu_ps(out + 8), sums[row][1]);
      }
      _mm256_storeu_ps(out, sums[row][0]);
      _mm256_storeu_ps(out + 8, sums[row][1]);
      continue;
    }
    alignas(32) float lanes[kF32PanelColumns];
    _mm256_store_ps(lanes, sums[row][0]);
    _mm256_store_ps(lanes + 8, sums[row][1]);
    for (int column = 0; column < columns; ++column)
      out[column] = accumulate ? out[column] + lanes[column] : lanes[column];
  }
}

} // namespace

void panelRowsAvx2(const float *x, int64_t xStride, int rows,
                   const float *panel, int64_t depth, float *y, int64_t yStride,
                   int columns, bool accumulate) {
  switch (rows) {
  case 6:
    return panelRows<6>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  case 5:
    return panelRows<5>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  case 4:
    return panelRows<4>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  case 3:
    return panelRows<3>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  case 2:
    return panelRows<2>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  default:
    return panelRows<1>(x, xStride, panel, depth, y, yStride, columns,
                        accumulate);
  }
}

} // namespace spanc::cpu::f32gemm
