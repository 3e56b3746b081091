//===- LlamaCppNumerics.cpp - RoPE and SwiGLU with llama.cpp's roundings --===//

#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <cmath>
#include <vector>

namespace spanc::cpu {

namespace {

/// The exponential of 16 lanes, reduction and polynomial as in the file
/// comment of the header. Constants are the algorithm's (hex floats).
SPANC_AVX512 inline __m512 expLanes(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 shifted =
      _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(shifted, shift);
  // x - n * ln2, ln2 split in a high and a low part.
  const __m512 reduced =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                       _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 square = _mm512_mul_ps(reduced, reduced);
  const __m512 high =
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), reduced,
                                      _mm512_set1_ps(0x1.573e2ep-5f)),
                      square,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), reduced,
                                      _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 polynomial =
      _mm512_fmadd_ps(high, square,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), reduced,
                                      _mm512_set1_ps(1.0f)));
  const __m512 result = _mm512_scalef_ps(polynomial, n);
  const __mmask16 outOfRange =
      _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  if (!outOfRange)
    return result;
  // Far outside the float range the routine substitutes a constant; keep
  // its choice (n <= 0 gives inf, else 0) so both engines agree.
  const __m512 substitute = _mm512_mask_blend_ps(
      _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
      _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(outOfRange, result, substitute);
}

SPANC_AVX512 void swiGluRow(const float *gate, const float *up, float *out,
                            int64_t cols) {
  int64_t col = 0;
  for (; col + 16 <= cols; col += 16) {
    const __m512 g = _mm512_loadu_ps(gate + col);
    const __m512 silu = _mm512_div_ps(
        g, _mm512_add_ps(_mm512_set1_ps(1.0f),
                         expLanes(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_storeu_ps(out + col, _mm512_mul_ps(silu, _mm512_loadu_ps(up + col)));
  }
  for (; col < cols; ++col) {
    const float silu = gate[col] / (1.0f + std::exp(-gate[col]));
    out[col] = silu * up[col];
  }
}

SPANC_AVX512 void expRow(const float *x, float *out, int64_t count) {
  int64_t index = 0;
  for (; index + 16 <= count; index += 16)
    _mm512_storeu_ps(out + index, expLanes(_mm512_loadu_ps(x + index)));
  for (; index < count; ++index)
    out[index] = std::exp(x[index]);
}

} // namespace

bool hasLlamaCppNumerics() { return cpuFeatures().hasAvx512(); }

void ropeLlamaCpp(const LlamaCppRopeShape &shape, const int32_t *positions,
                  float *x) {
  const int pairs = shape.rotaryDim / 2;
  const float thetaScale = std::pow(shape.base, -2.0f / float(shape.rotaryDim));
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row) {
    // The row's cos/sin table, as ggml builds it per position.
    float cosines[512], sines[512];
    float theta = float(positions[row]);
    for (int pair = 0; pair < pairs && pair < 512; ++pair) {
      const float factor =
          shape.frequencyFactors ? shape.frequencyFactors[pair] : 1.0f;
      const float angle = shape.linearScale * (theta / factor);
      cosines[pair] = std::cos(angle);
      sines[pair] = std::sin(angle);
      theta *= thetaScale;
    }
    for (int64_t head = 0; head < shape.numHeads; ++head) {
      float *v = x + row * shape.rowStride + head * shape.headDim;
      for (int pair = 0; pair < pairs; ++pair) {
        const int first = shape.neox ? pair : 2 * pair;
        const int second = shape.neox ? pair + pairs : 2 * pair + 1;
        const float x0 = v[first], x1 = v[second];
        const float c = cosines[pair], s = sines[pair];
        v[first] = std::fma(x0, c, -(x1 * s));
        v[second] = std::fma(x0, s, x1 * c);
      }
    }
  }
}

void swiGluLlamaCpp(const RowShape &shape, const float *gate, const float *up,
                    float *out) {
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row)
    swiGluRow(gate + row * shape.inputStride, up + row * shape.inputStride,
              out + row * shape.outputStride, shape.cols);
}

void expLlamaCpp(const float *x, float *out, int64_t count) {
  expRow(x, out, count);
}

} // namespace spanc::cpu
