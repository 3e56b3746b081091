//===- Elementwise.cpp - Row-wise CPU kernels of a decoder layer ----------===//

#include "runtime/kernels/cpu/Elementwise.h"

#include <cmath>
#include <cstring>

namespace spanc::cpu {

void rmsNorm(const RowShape &shape, const float *x, const float *weight,
             float epsilon, float *out) {
  const int64_t cols = shape.cols;
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row) {
    const float *__restrict in = x + row * shape.inputStride;
    float *__restrict dst = out + row * shape.outputStride;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t col = 0; col < cols; ++col)
      sum += in[col] * in[col];
    const float scale = 1.0f / std::sqrt(sum / float(cols) + epsilon);
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] = in[col] * scale * weight[col];
  }
}

void swiGlu(const RowShape &shape, const float *gate, const float *up,
            float *out) {
  const int64_t cols = shape.cols;
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row) {
    const float *__restrict g = gate + row * shape.inputStride;
    const float *__restrict u = up + row * shape.inputStride;
    float *__restrict dst = out + row * shape.outputStride;
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] = g[col] / (1.0f + std::exp(-g[col])) * u[col];
  }
}

void addInPlace(const RowShape &shape, float *x, const float *y) {
  const int64_t cols = shape.cols;
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row) {
    float *__restrict dst = x + row * shape.inputStride;
    const float *__restrict src = y + row * shape.inputStride;
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col)
      dst[col] += src[col];
  }
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
