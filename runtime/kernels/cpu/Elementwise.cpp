//===- Elementwise.cpp - Row-wise CPU kernels of a decoder layer ----------===//

#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/RowLoop.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <cmath>
#include <cstring>

namespace spanc::cpu {

namespace {

/// One RMSNorm row with AVX-512 in a fixed order: lane-wise FMAs of the
/// squares over 16-column chunks, one tree over the lanes, the tail in
/// order; (x * scale) * weight. Written out, not left to the compiler's
/// reduction, so that every build (release or sanitizer, vectorized or
/// not) gives the same bits.
SPANC_AVX512 void rmsNormRowAvx512(const float *in, const float *weight,
                                   int64_t cols, float epsilon, float *out) {
  __m512 squares = _mm512_setzero_ps();
  int64_t col = 0;
  for (; col + 16 <= cols; col += 16) {
    const __m512 values = _mm512_loadu_ps(in + col);
    squares = _mm512_fmadd_ps(values, values, squares);
  }
  float sum = sumLanes(squares);
  for (; col < cols; ++col)
    sum = std::fma(in[col], in[col], sum);
  const float scale = 1.0f / std::sqrt(sum / float(cols) + epsilon);
  const __m512 scales = _mm512_set1_ps(scale);
  col = 0;
  for (; col + 16 <= cols; col += 16)
    _mm512_storeu_ps(
        out + col,
        _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(in + col), scales),
                      _mm512_loadu_ps(weight + col)));
  for (; col < cols; ++col)
    out[col] = in[col] * scale * weight[col];
}

/// rmsNormRowAvx512 on 8 lanes (AVX2 + FMA).
SPANC_AVX2 void rmsNormRowAvx2(const float *in, const float *weight,
                               int64_t cols, float epsilon, float *out) {
  __m256 squares = _mm256_setzero_ps();
  int64_t col = 0;
  for (; col + 8 <= cols; col += 8) {
    const __m256 values = _mm256_loadu_ps(in + col);
    squares = _mm256_fmadd_ps(values, values, squares);
  }
  float sum = sumLanes(squares);
  for (; col < cols; ++col)
    sum = std::fma(in[col], in[col], sum);
  const float scale = 1.0f / std::sqrt(sum / float(cols) + epsilon);
  const __m256 scales = _mm256_set1_ps(scale);
  col = 0;
  for (; col + 8 <= cols; col += 8)
    _mm256_storeu_ps(
        out + col,
        _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(in + col), scales),
                      _mm256_loadu_ps(weight + col)));
  for (; col < cols; ++col)
    out[col] = in[col] * scale * weight[col];
}

bool hasAvx2Path() {
  const CpuFeatures &features = cpuFeatures();
  return features.avx2 && features.fma;
}

} // namespace

void rmsNorm(const RowShape &shape, const float *x, const float *weight,
             float epsilon, float *out) {
  const int64_t cols = shape.cols;
  if (cpuFeatures().hasAvx512()) {
    forEachRow(shape.rows, true, [&](int64_t row) {
      rmsNormRowAvx512(x + row * shape.inputStride, weight, cols, epsilon,
                       out + row * shape.outputStride);
    });
    return;
  }
  if (hasAvx2Path()) {
    forEachRow(shape.rows, true, [&](int64_t row) {
      rmsNormRowAvx2(x + row * shape.inputStride, weight, cols, epsilon,
                     out + row * shape.outputStride);
    });
    return;
  }
  forEachRow(shape.rows, true, [&](int64_t row) {
    const float *__restrict in = x + row * shape.inputStride;
    float *__restrict dst = out + row * shape.outputStride;
    float sum = 0;
    for (int64_t col = 0; col < cols; ++col)
      sum += in[col] * in[col];
    const float scale = 1.0f / std::sqrt(sum / float(cols) + epsilon);
    for (int64_t col = 0; col < cols; ++col)
      dst[col] = in[col] * scale * weight[col];
  });
}

void rmsNormDoubleSum(const RowShape &shape, const float *x,
                      const float *weight, float epsilon, float *out) {
  const int64_t cols = shape.cols;
  forEachRow(shape.rows, true, [&](int64_t row) {
    const float *__restrict in = x + row * shape.inputStride;
    float *__restrict dst = out + row * shape.outputStride;
    double sum = 0;
    for (int64_t col = 0; col < cols; ++col) {
      const float square = in[col] * in[col];
      sum += double(square);
    }
    const float mean = float(sum / double(cols));
    const float scale = 1.0f / std::sqrt(mean + epsilon);
    for (int64_t col = 0; col < cols; ++col) {
      const float scaled = in[col] * scale;
      dst[col] = scaled * weight[col];
    }
  });
}

namespace {

SPANC_AVX512 void swiGluRowAvx512(const float *gate, const float *up,
                                  float *out, int64_t cols) {
  int64_t col = 0;
  for (; col + 16 <= cols; col += 16)
    _mm512_storeu_ps(out + col, swiGlu512(_mm512_loadu_ps(gate + col),
                                          _mm512_loadu_ps(up + col)));
  for (; col < cols; ++col)
    out[col] = gate[col] / (1.0f + std::exp(-gate[col])) * up[col];
}

/// swiGluRowAvx512 on 8 lanes (swiGlu256: swiGlu512's operations); the
/// columns past the last whole vector take std::exp, as there.
SPANC_AVX2 void swiGluRowAvx2(const float *gate, const float *up, float *out,
                              int64_t cols) {
  int64_t col = 0;
  for (; col + 8 <= cols; col += 8)
    _mm256_storeu_ps(out + col, swiGlu256(_mm256_loadu_ps(gate + col),
                                          _mm256_loadu_ps(up + col)));
  for (; col < cols; ++col)
    out[col] = gate[col] / (1.0f + std::exp(-gate[col])) * up[col];
}

} // namespace

void swiGlu(const RowShape &shape, const float *gate, const float *up,
            float *out) {
  const int64_t cols = shape.cols;
  if (cpuFeatures().hasAvx512()) {
    forEachRow(shape.rows, true, [&](int64_t row) {
      swiGluRowAvx512(gate + row * shape.inputStride,
                      up + row * shape.inputStride,
                      out + row * shape.outputStride, cols);
    });
    return;
  }
  if (hasAvx2Path()) {
    forEachRow(shape.rows, true, [&](int64_t row) {
      swiGluRowAvx2(gate + row * shape.inputStride,
                    up + row * shape.inputStride,
                    out + row * shape.outputStride, cols);
    });
    return;
  }
  forEachRow(shape.rows, true, [&](int64_t row) {
    const float *__restrict g = gate + row * shape.inputStride;
    const float *__restrict u = up + row * shape.inputStride;
    float *__restrict dst = out + row * shape.outputStride;
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] = g[col] / (1.0f + std::exp(-g[col])) * u[col];
  });
}

void addInPlace(const RowShape &shape, float *x, const float *y) {
  const int64_t cols = shape.cols;
  forEachRow(shape.rows, true, [&](int64_t row) {
    float *__restrict dst = x + row * shape.inputStride;
    const float *__restrict src = y + row * shape.inputStride;
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] += src[col];
  });
}

void addBias(const RowShape &shape, float *x, const float *bias) {
  const int64_t cols = shape.cols;
  forEachRow(shape.rows, true, [&](int64_t row) {
    float *__restrict dst = x + row * shape.outputStride;
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] += bias[col];
  });
}

void decodeF32Row(const void *row, float *out, int64_t count, const void *) {
  std::memcpy(out, row, size_t(count) * sizeof(float));
}

void embeddingLookup(const EmbeddingTable &table, const int32_t *ids,
                     int64_t count, float *out, int64_t outputStride) {
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t i = 0; i < count; ++i)
    table.decode(table.data + int64_t(ids[i]) * table.rowBytes,
                 out + i * outputStride, table.dim, table.context);
}

} // namespace spanc::cpu
