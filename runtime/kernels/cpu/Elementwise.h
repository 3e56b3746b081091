//===- Elementwise.h - Row-wise CPU kernels of a decoder layer ------------===//
//
// RMSNorm, SwiGLU, residual add and embedding lookup: free functions over raw
// row-major f32 buffers with explicit row strides, threaded over rows with
// OpenMP. They allocate nothing.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ELEMENTWISE_H
#define SPANC_RUNTIME_KERNELS_CPU_ELEMENTWISE_H

#include <cstdint>

namespace spanc::cpu {

/// A block of `rows` rows of `cols` floats, `stride` floats apart.
struct RowShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inputStride = 0;  ///< floats between input rows
  int64_t outputStride = 0; ///< floats between output rows
};

/// out[r][c] = x[r][c] / sqrt(mean_c(x[r]^2) + epsilon) * weight[c].
/// `out` may alias `x` when the strides match.
void rmsNorm(const RowShape &shape, const float *x, const float *weight,
             float epsilon, float *out);

/// The same with llama.cpp's arithmetic (ggml's rms_norm fused with the
/// weight multiply): the sum of squares in double, each square rounded to
/// f32 first, mean and scale in f32, out = (x * scale) * weight. For the
/// engine's llama.cpp numerics mode.
void rmsNormDoubleSum(const RowShape &shape, const float *x,
                      const float *weight, float epsilon, float *out);

/// out[r][c] = silu(gate[r][c]) * up[r][c], silu(g) = g / (1 + e^-g); gate
/// and up rows are `shape.inputStride` apart (e.g. the two halves of one
/// fused gate|up GEMM output).
void swiGlu(const RowShape &shape, const float *gate, const float *up,
            float *out);

/// x[r][c] += y[r][c] (the residual connection), both with `inputStride`.
void addInPlace(const RowShape &shape, float *x, const float *y);

/// x[r][c] += bias[c], x rows `shape.outputStride` apart (a projection's
/// bias, added to a block of its output columns).
void addBias(const RowShape &shape, float *x, const float *bias);

/// Decodes `count` elements of one stored row into f32 (a dequantizer).
using DecodeRowFn = void (*)(const void *row, float *out, int64_t count,
                             const void *context);

/// An embedding table of `numRows` rows of `dim` elements, `rowBytes` apart,
/// decoded row by row by `decode` (f32 tables use decodeF32Row).
struct EmbeddingTable {
  const uint8_t *data = nullptr;
  int64_t numRows = 0;
  int64_t dim = 0;
  int64_t rowBytes = 0;
  DecodeRowFn decode = nullptr;
  const void *context = nullptr;
};

/// The decoder of f32 rows.
void decodeF32Row(const void *row, float *out, int64_t count,
                  const void *context);

/// out[i][...] = table[ids[i]] for `count` ids, rows `outputStride` apart.
/// Ids must be in [0, table.numRows) (checked by the caller).
void embeddingLookup(const EmbeddingTable &table, const int32_t *ids,
                     int64_t count, float *out, int64_t outputStride);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ELEMENTWISE_H
