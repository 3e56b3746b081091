//===- F32Gemm.h - spanc's f32 weight GEMM below AVX-512 ------------------===//
//
// y[M][N] = x[M][K] * W^T in f32 on CPUs without AVX-512, where the
// weights stay f32 (no native bf16). oneDNN's f32 GEMM there (its gemm:jit,
// not the brgemm it runs at AVX-512) chooses its blocking and its split of
// K from M, N and the thread count, so a row's sum came out in another
// order alone than among 300 rows, or on 4 threads than on 2: a span hit's
// short tail did not give the miss's bits, and a call's answer could
// depend on what shared its step (docs/ARCHITECTURE.md, "Numerics"). Here
// every output element is one chain of multiply-adds over K in order,
// computed by one thread, whatever the batch, the row's place in it or the
// thread count.
//
// Weights are packed once into panels of 16 output columns, K-major (a
// panel's 16 weights of one k are two AVX2 vectors); a panel past N is
// padded with zeros. Rows are taken six at a time (twelve AVX2 sums and the
// panel's two vectors fill the sixteen registers). The AVX2+FMA micro-
// kernel is in F32GemmAvx2.cpp; the portable one (the scalar kernel path)
// in F32Gemm.cpp. Their bits differ (fused or separate multiply-add), as
// the kernel paths' bits do; each is invariant on its own path.
//
// Borrowed weights (borrowF32Panels, on the AVX2 path) keep no f32 copy,
// which would cost 4 bytes a weight resident: a panel's 16 rows are one
// tile group of the 4/8-bit PackedQuantMatrix that decode reads, unpacked
// into a per-thread panel per call. The values are those packF32Panels
// holds for the dequantized matrix (q * d + m or q * d: q * d is exact in
// f32, as PanelUnpacker.h explains), so the products keep their bits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_F32GEMM_H
#define SPANC_RUNTIME_KERNELS_CPU_F32GEMM_H

#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/QuantGemv.h"

#include <cstdint>
#include <vector>

namespace spanc::cpu {

/// Output columns per panel.
constexpr int kF32PanelColumns = 16;
/// Rows one micro-kernel call multiplies.
constexpr int kF32GemmRowBlock = 6;

/// A weight W of `rows` (N) x `columns` (K) as panels: panel p holds W's
/// rows [16p, 16p + 16) as data[(p * K + k) * 16 + j] = W[16p + j][k].
struct F32Panels {
  int64_t rows = 0, columns = 0;
  std::vector<float, AlignedAllocator<float>> data; ///< empty when borrowed
  /// Borrowed: PackedQuantMatrix::bytes (tile group p is panel p).
  const uint8_t *quantBytes = nullptr;
  QuantFormat quantFormat = QuantFormat::Q4_1;

  bool isBorrowed() const { return quantBytes != nullptr; }

  int64_t numPanels() const {
    return (rows + kF32PanelColumns - 1) / kF32PanelColumns;
  }
  int64_t sizeInBytes() const { return int64_t(data.size() * sizeof(float)); }
};

/// Packs a row-major [rows][columns] f32 matrix.
F32Panels packF32Panels(const float *matrix, int64_t rows, int64_t columns);

/// Whether borrowF32Panels' weights can be multiplied here: the unpacking
/// is AVX2 code.
bool canBorrowF32Panels();

/// Panels that unpack `matrix`'s tiles per call (matrix.bytes must outlive
/// them; moving the matrix keeps them). Requires canBorrowF32Panels().
F32Panels borrowF32Panels(const PackedQuantMatrix &matrix);

/// y = x * W^T, or y += x * W^T when `accumulate` (each element y + p, as
/// addInPlace adds); x has K floats a row, y N. Panels are split between
/// the OpenMP threads (on the calling thread inside a parallel region).
void f32PanelGemm(const F32Panels &weights, const float *x, int64_t m, float *y,
                  bool accumulate);

namespace f32gemm {
/// The first `columns` of a row's 16 sums into out (added to it when
/// `accumulate`): a panel's last columns past N, for both micro-kernels.
inline void writeColumns(const float *sums, float *out, int columns,
                         bool accumulate) {
  for (int column = 0; column < columns; ++column)
    out[column] = accumulate ? out[column] + sums[column] : sums[column];
}

/// One micro-kernel call: `rows` (1..6) rows of x (stride xStride) against
/// one panel over `depth` (K) values, into the first `columns` (1..16)
/// columns of y (stride yStride). Internal to F32Gemm*.cpp.
void panelRowsAvx2(const float *x, int64_t xStride, int rows,
                   const float *panel, int64_t depth, float *y, int64_t yStride,
                   int columns, bool accumulate);

/// Panel `panel` of borrowed weights unpacked into out (K x 16 floats,
/// 32-byte aligned), in packF32Panels' layout. Internal to F32Gemm*.cpp.
void unpackPanelAvx2(const F32Panels &weights, int64_t panel, float *out);
} // namespace f32gemm

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_F32GEMM_H
