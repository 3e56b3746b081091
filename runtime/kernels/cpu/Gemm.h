//===- Gemm.h - Weight GEMMs: spanc's AMX kernel or oneDNN's matmul -------===//
//
// y[M][N] = x[M][K] * W^T for a weight W of N rows of K (the GGUF layout).
// Weights are converted once, at load time, in bf16 where the CPU
// multiplies bf16 natively (AVX-512-BF16 or AMX) and in f32 otherwise (or
// when forced, for debugging): into AMX tile panels where the CPU has AMX
// (AmxGemm.h: bf16 with f32 sums, the SwiGLU and the residual add in its
// epilogue; or no copy at all: borrowQuantized unpacks 4/8-bit tiles per
// call), else into the blocked layout oneDNN picks, whose matmul
// primitives are created once per (M, N, K) and cached, or, below AVX-512,
// into spanc's f32 panels (F32Gemm.h). Activations are
// converted to bf16 per call when the weights are bf16. oneDNN is hidden
// behind this header.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_GEMM_H
#define SPANC_RUNTIME_KERNELS_CPU_GEMM_H

#include "runtime/kernels/cpu/AmxGemm.h"
#include "runtime/kernels/cpu/F32Gemm.h"
#include "runtime/kernels/cpu/QuantGemv.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace spanc::cpu {

enum class GemmPrecision { F32, Bf16 };

/// Who multiplies: spanc's AMX kernel (AmxGemm.h; bf16 on CPUs with AMX),
/// spanc's AVX-512 BF16 kernel over the same panels (Avx512Bf16Gemm.h; bf16
/// on CPUs with AVX512_BF16), oneDNN's matmul (f32 on AVX-512 CPUs without
/// native bf16, or when asked for), or spanc's f32 kernel (F32Gemm.h: f32
/// below AVX-512, where oneDNN's sums depend on the batch).
enum class GemmKernel { Amx, Avx512Bf16, OneDnn, F32 };
/// "amx", "avx512bf16", "onednn" or "f32".
const char *gemmKernelName(GemmKernel kernel);
/// "amx", "avx512bf16" or "onednn".
std::optional<GemmKernel> parseGemmKernel(llvm::StringRef name);
/// The kernels that multiply spanc's bf16 panels (AmxGemm.h).
inline bool usesPanels(GemmKernel kernel) {
  return kernel == GemmKernel::Amx || kernel == GemmKernel::Avx512Bf16;
}

/// bf16 where the CPU has native bf16 GEMM, else f32.
GemmPrecision defaultGemmPrecision();
const char *gemmPrecisionName(GemmPrecision precision);

class GemmEngine;

/// What a multiply does with its products P = x * W^T.
enum class GemmOutput {
  Store,      ///< y = P
  Accumulate, ///< y += P (the residual connection)
};

/// One weight matrix in the layout of the engine's kernel.
class GemmWeights {
public:
  /// Empty weights (packWeights() makes real ones).
  GemmWeights();
  ~GemmWeights();
  GemmWeights(GemmWeights &&) noexcept;
  GemmWeights &operator=(GemmWeights &&) noexcept;

  int64_t rows() const { return numRows; }       ///< N (outputs)
  int64_t columns() const { return numColumns; } ///< K (inputs)
  GemmPrecision precision() const { return weightPrecision; }
  /// Packed by packGatedWeights (multiplyGated only).
  bool isGated() const { return gated; }
  int64_t sizeInBytes() const;

private:
  friend class GemmEngine;
  struct Storage;
  std::unique_ptr<Storage> storage;
  int64_t numRows = 0;
  int64_t numColumns = 0;
  GemmPrecision weightPrecision = GemmPrecision::F32;
  GemmKernel kernel = GemmKernel::OneDnn;
  bool gated = false;
};

/// Packs weights for and runs the engine's kernel: the panel kernels'
/// scratch, or oneDNN's engine, stream, primitive cache and activation
/// scratch.
/// Not thread-safe: one forward pass at a time (it threads internally).
class GemmEngine {
public:
  /// `preferred` Amx falls back to Avx512Bf16 on a CPU without AMX, and
  /// either falls back to oneDNN where the CPU cannot run it or `precision`
  /// is f32; f32 below AVX-512 takes spanc's f32 kernel instead, unless
  /// oneDNN is `preferred` (whose rows there depend on the batch and the
  /// thread count: F32Gemm.h).
  explicit GemmEngine(GemmPrecision precision = defaultGemmPrecision(),
                      GemmKernel preferred = GemmKernel::Amx);
  ~GemmEngine();
  GemmEngine(const GemmEngine &) = delete;
  GemmEngine &operator=(const GemmEngine &) = delete;

  GemmPrecision precision() const { return enginePrecision; }
  GemmKernel kernel() const { return engineKernel; }

  /// Converts a row-major [rows][columns] f32 matrix into weights.
  llvm::Expected<GemmWeights> packWeights(const float *matrix, int64_t rows,
                                          int64_t columns);

  /// A [gate; up] matrix (rows/2 gate rows, then rows/2 up rows) for
  /// multiplyGated; rows must be even.
  llvm::Expected<GemmWeights> packGatedWeights(const float *matrix,
                                               int64_t rows, int64_t columns);

  /// Whether borrowQuantized works: a panel kernel (usesPanels), on a CPU
  /// with the bf16 conversions it unpacks with, or spanc's f32 kernel on
  /// AVX2 (F32Gemm.h, borrowF32Panels).
  bool canBorrowQuantized() const;

  /// Weights that multiply `matrix`'s 4/8-bit tiles, unpacked to bf16 (or
  /// f32) per call, instead of a bf16 (or f32) copy (AmxGemm.h, "Borrowed
  /// weights"): the same products as packWeights of its dequantized values,
  /// without 2 bytes a weight resident. matrix.bytes must outlive the weights
  /// (moving the matrix keeps them). `gated`: for multiplyGated, as
  /// packGatedWeights. Requires canBorrowQuantized().
  GemmWeights borrowQuantized(const PackedQuantMatrix &matrix, bool gated);

  /// y[M][N] = x[M][K] * W^T (or y += with Accumulate); x and y are dense
  /// row-major (x: K floats per row, y: N floats per row).
  llvm::Error multiply(const GemmWeights &weights, const float *x, int64_t m,
                       float *y, GemmOutput output = GemmOutput::Store);

  /// h[M][N/2] = silu(x * Wgate^T) * (x * Wup^T) (SwiGLU) for gated
  /// weights. The panel kernels compute it in the GEMM's epilogue; oneDNN
  /// through a scratch and the elementwise kernel, with the same bits.
  llvm::Error multiplyGated(const GemmWeights &weights, const float *x,
                            int64_t m, float *h);

  /// The implementation oneDNN chose for a shape (for logs and benches).
  std::string implementationName(const GemmWeights &weights, int64_t m);

private:
  /// Weights of this engine's precision and kernel with empty storage.
  GemmWeights emptyWeights(int64_t rows, int64_t columns) const;

  /// The panel kernel of the weights (usesPanels) with its epilogue.
  void multiplyPanels(const GemmWeights &weights, const float *x, int64_t m,
                      float *y, AmxEpilogue epilogue);

  /// y = x * W^T through oneDNN (oneDNN's weights).
  llvm::Error multiplyOneDnn(const GemmWeights &weights, const float *x,
                             int64_t m, float *y);

  struct Impl;
  std::unique_ptr<Impl> impl;
  GemmPrecision enginePrecision;
  GemmKernel engineKernel;
};

/// Rounds f32 to bf16 (nearest even) for `count` values.
void convertToBf16(const float *source, uint16_t *destination, int64_t count);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_GEMM_H
