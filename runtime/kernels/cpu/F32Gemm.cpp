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
#include <cassert>
#include <cstring>

namespace spanc::cpu {

namespace {

/// Below this many multiply-adds a call runs on the calling thread: a
/// decode-size product costs less than waking the team.
constexpr int64_t kParallelWork = int64_t(1) << 16;

/// Four lanes: the baseline x86-64 target's SSE2 register.
typedef float Lanes __attribute__((vector_size(16)));

/// Writes one row's 16 sums to the first `columns` columns of out.
void writeRow(const Lanes (&sums)[4], float *out, int columns,
              bool accumulate) {
  float lanes[kF32PanelColumns];
  std::memcpy(lanes, sums, sizeof(lanes));
  f32gemm::writeColumns(lanes, out, columns, accumulate);
}

/// Two rows (or one: `second` null), their eight sums of four lanes named,
/// so that with the panel's four weight vectors they stay in SSE2's sixteen
/// registers (an array of them GCC 12 at -O3 stored to the stack at every
/// K step, as in F32GemmAvx2.cpp).
void twoRowsPortable(const float *first, const float *second,
                     const float *panel, int64_t depth, float *y,
                     int64_t yStride, int columns, bool accumulate) {
  Lanes a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
  for (int64_t k = 0; k < depth; ++k) {
    Lanes w0, w1, w2, w3;
    const float *weights = panel + k * kF32PanelColumns;
    std::memcpy(&w0, weights, sizeof(w0));
    std::memcpy(&w1, weights + 4, sizeof(w1));
    std::memcpy(&w2, weights + 8, sizeof(w2));
    std::memcpy(&w3, weights + 12, sizeof(w3));
    const float value = first[k];
    a0 += value * w0;
    a1 += value * w1;
    a2 += value * w2;
    a3 += value * w3;
    if (second) {
      const float other = second[k];
      b0 += other * w0;
      b1 += other * w1;
      b2 += other * w2;
      b3 += other * w3;
    }
  }
  const Lanes rowA[4] = {a0, a1, a2, a3};
  writeRow(rowA, y, columns, accumulate);
  if (second) {
    const Lanes rowB[4] = {b0, b1, b2, b3};
    writeRow(rowB, y + yStride, columns, accumulate);
  }
}

void panelRows(bool avx2, const float *x, int64_t xStride, int rows,
               const float *panel, int64_t depth, float *y, int64_t yStride,
               int columns, bool accumulate) {
  if (avx2)
    return f32gemm::panelRowsAvx2(x, xStride, rows, panel, depth, y, yStride,
                                  columns, accumulate);
  // Two rows at a time: each row's sums are its own, so the split does
  // not change them.
  for (int row = 0; row < rows; row += 2)
    twoRowsPortable(x + row * xStride,
                    row + 1 < rows ? x + (row + 1) * xStride : nullptr, panel,
                    depth, y + row * yStride, yStride, columns, accumulate);
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

bool canBorrowF32Panels() {
  const CpuFeatures &features = cpuFeatures();
  return features.avx2 && features.fma && features.f16c;
}

F32Panels borrowF32Panels(const PackedQuantMatrix &matrix) {
  assert(canBorrowF32Panels() && "the unpacking is AVX2 code");
  F32Panels panels;
  panels.rows = matrix.rows;
  panels.columns = matrix.columns;
  panels.quantBytes = matrix.bytes.data();
  panels.quantFormat = matrix.format;
  return panels;
}

void f32PanelGemm(const F32Panels &weights, const float *x, int64_t m, float *y,
                  bool accumulate) {
  const int64_t n = weights.rows, depth = weights.columns;
  const CpuFeatures &features = cpuFeatures();
  const bool avx2 = features.avx2 && features.fma;
  const float *data = weights.data.data();
  forEachRow(
      weights.numPanels(), m * n * depth >= kParallelWork, [&](int64_t panel) {
        const float *panelData;
        if (weights.isBorrowed()) {
          // One panel at a time per thread: K x 16 floats, in L2.
          thread_local std::vector<float, AlignedAllocator<float>> unpacked;
          if (unpacked.size() < size_t(depth * kF32PanelColumns))
            unpacked.resize(size_t(depth * kF32PanelColumns));
          f32gemm::unpackPanelAvx2(weights, panel, unpacked.data());
          panelData = unpacked.data();
        } else {
          panelData = data + panel * depth * kF32PanelColumns;
        }
        const int64_t firstColumn = panel * kF32PanelColumns;
        const int columns =
            int(std::min<int64_t>(kF32PanelColumns, n - firstColumn));
        for (int64_t row = 0; row < m; row += kF32GemmRowBlock)
          panelRows(avx2, x + row * depth, depth,
                    int(std::min<int64_t>(kF32GemmRowBlock, m - row)),
                    panelData, depth, y + row * n + firstColumn, n, columns,
                    accumulate);
      });
}

} // namespace spanc::cpu
