//===- F32Gemm.cpp - spanc's f32 weight GEMM below AVX-512 ----------------===//
//
// Packing, the driver and the portable micro-kernel (F32Gemm.h). The
// portable kernel runs on GCC's four-lane vectors (SSE2, the baseline
// x86-64 target, which has no FMA): each lane's sum is its column's chain
// of multiplies and adds over K in order (no -ffast-math here).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/F32Gemm.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/RowLoop.h"

#include <algorithm>
#include <cstring>

namespace spanc::cpu {

namespace {

/// Below this many multiply-adds a call runs on the calling thread: a
/// decode-size product costs less than waking the team.
constexpr int64_t kParallelWork = int64_t(1) << 16;

/// Four lanes: the baseline x86-64 target's SSE2 register.
typedef float Lanes __attribute__((vector_size(16)));

/// Up to three rows (twelve sums of four lanes, with the panel's four
/// weight vectors, fill SSE2's sixteen registers).
template <int Rows>
void panelRowsPortable(const float *x, int64_t xStride, const float *panel,
                       int64_t depth, float *y, int64_t yStride, int columns,
                       bool accumulate) {
  constexpr int kVectors = kF32PanelColumns / 4;
  Lanes sums[Rows][kVectors] = {};
  for (int64_t k = 0; k < depth; ++k) {
    Lanes weights[kVectors];
    std::memcpy(weights, panel + k * kF32PanelColumns, sizeof(weights));
    for (int row = 0; row < Rows; ++row) {
      const float value = x[row * xStride + k];
      for (int vector = 0; vector < kVectors; ++vector)
        sums[row][vector] += value * weights[vector];
    }
  }
  for (int row = 0; row < Rows; ++row) {
    float lanes[kF32PanelColumns];
    std::memcpy(lanes, sums[row], sizeof(lanes));
    float *out = y + row * yStride;
    for (int column = 0; column < columns; ++column)
      out[column] = accumulate ? out[column] + lanes[column] : lanes[column];
  }
}

void panelRows(bool avx2, const float *x, int64_t xStride, int rows,
               const float *panel, int64_t depth, float *y, int64_t yStride,
               int columns, bool accumulate) {
  if (avx2)
    return f32gemm::panelRowsAvx2(x, xStride, rows, panel, depth, y, yStride,
                                  columns, accumulate);
  // Three rows at a time: each row's sums are its own, so the split does
  // not change them.
  for (int first = 0; first < rows; first += 3) {
    const float *rowX = x + first * xStride;
    float *rowY = y + first * yStride;
    switch (std::min(3, rows - first)) {
    case 3:
      panelRowsPortable<3>(rowX, xStride, panel, depth, rowY, yStride, columns,
                           accumulate);
      break;
    case 2:
      panelRowsPortable<2>(rowX, xStride, panel, depth, rowY, yStride, columns,
                           accumulate);
      break;
    default:
      panelRowsPortable<1>(rowX, xStride, panel, depth, rowY, yStride, columns,
                           accumulate);
      break;
    }
  }
}

} // namespace

F32Panels packF32Panels(const float *matrix, int64_t rows, int64_t columns) {
  F32Panels panels;
  panels.rows = rows;
  panels.columns = columns;
  panels.data.assign(size_t(panels.numPanels() * columns * kF32PanelColumns),
                     0.0f);
  for (int64_t row = 0; row < rows; ++row) {
    float *panel = panels.data.data() +
                   row / kF32PanelColumns * columns * kF32PanelColumns +
                   row % kF32PanelColumns;
    const float *source = matrix + row * columns;
    for (int64_t k = 0; k < columns; ++k)
      panel[k * kF32PanelColumns] = source[k];
  }
  return panels;
}

void f32PanelGemm(const F32Panels &weights, const float *x, int64_t m, float *y,
                  bool accumulate) {
  const int64_t n = weights.rows, depth = weights.columns;
  const CpuFeatures &features = cpuFeatures();
  const bool avx2 = features.avx2 && features.fma;
  const float *data = weights.data.data();
  forEachRow(weights.numPanels(), m * n * depth >= kParallelWork,
             [&](int64_t panel) {
               const float *panelData = data + panel * depth * kF32PanelColumns;
               const int64_t firstColumn = panel * kF32PanelColumns;
               const int columns =
                   int(std::min<int64_t>(kF32PanelColumns, n - firstColumn));
               for (int64_t row = 0; row < m; row += kF32GemmRowBlock)
                 panelRows(avx2, x + row * depth, depth,
                           int(std::min<int64_t>(kF32GemmRowBlock, m - row)),
                           panelData, depth, y + row * n + firstColumn, n,
                           columns, accumulate);
             });
}

} // namespace spanc::cpu
