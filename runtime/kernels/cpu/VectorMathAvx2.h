//===- VectorMathAvx2.h - AVX2 elementary functions for the CPU kernels ---===//
//
// VectorMath.h's functions on 8 lanes, for the AVX2 kernel path (AVX2, FMA
// and F16C: every CPU with AVX2 has them). Compiled by target attributes
// (the build is generic x86-64); callers dispatch on cpuFeatures(). exp256
// and swiGlu256 are exp512 and swiGlu512 lane for lane, so a lane's bits
// are the same on both paths.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_VECTORMATHAVX2_H
#define SPANC_RUNTIME_KERNELS_CPU_VECTORMATHAVX2_H

#include <immintrin.h>

#define SPANC_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace spanc::cpu {

/// An empty asm the value passes through, so that the compiler keeps an
/// integer vector in a register at this point: GCC 12 at -O3 otherwise
/// hoists a block's vpmaddubsw products ahead of their adds (integer sums
/// may be reordered) and spills them (QuantGemvAvx2.cpp,
/// QuantGemmAvx2.cpp).
SPANC_AVX2 inline void sequencePoint(__m256i &value) { asm("" : "+x"(value)); }

/// e^x on 8 lanes: exp512's range reduction and polynomial (VectorMath.h),
/// 2^n built in the exponent bits.
SPANC_AVX2 inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

/// The sum of 8 lanes in one fixed order: (i + i+4), then (i + i+2), then
/// 0 + 1 (sumLanes(__m512)'s last three steps).
SPANC_AVX2 inline float sumLanes(__m256 values) {
  const __m128 fours = _mm_add_ps(_mm256_castps256_ps128(values),
                                  _mm256_extractf128_ps(values, 1));
  const __m128 twos = _mm_add_ps(fours, _mm_movehl_ps(fours, fours));
  return _mm_cvtss_f32(_mm_add_ss(twos, _mm_movehdup_ps(twos)));
}

/// silu(gate) * up on 8 lanes, as swiGlu512.
SPANC_AVX2 inline __m256 swiGlu256(__m256 gate, __m256 up) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sigmoid = _mm256_div_ps(
      one,
      _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), gate))));
  return _mm256_mul_ps(_mm256_mul_ps(gate, sigmoid), up);
}

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_VECTORMATHAVX2_H
