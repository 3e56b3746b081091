//===- VectorMath.h - AVX-512 elementary functions for the CPU kernels ----===//
//
// Inline helpers compiled for AVX-512 via target attributes (the build is
// generic x86-64), for kernels that dispatch on cpuFeatures() at run time.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_VECTORMATH_H
#define SPANC_RUNTIME_KERNELS_CPU_VECTORMATH_H

// GCC 12 reports its own AVX-512 intrinsics (which start from an
// "undefined" vector on purpose) as (maybe-)uninitialized under -Werror.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#define SPANC_AVX512                                                           \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
/// SPANC_AVX512 plus the bf16 conversions (VCVTNE2PS2BF16).
#define SPANC_AVX512BF16                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace spanc::cpu {

/// rows[i] (16 lanes of 32 bits) become columns: rows[j] lane i = old
/// rows[i] lane j.
SPANC_AVX512 inline void transpose16(__m512i (&rows)[16]) {
  __m512i pairs[16], quads[16];
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  // quads[4k + m], 128-bit lane L: rows 4k..4k+3 of column 4L + m.
  for (int k = 0; k < 16; k += 4) {
    quads[k] = _mm512_unpacklo_epi64(pairs[k], pairs[k + 2]);
    quads[k + 1] = _mm512_unpackhi_epi64(pairs[k], pairs[k + 2]);
    quads[k + 2] = _mm512_unpacklo_epi64(pairs[k + 1], pairs[k + 3]);
    quads[k + 3] = _mm512_unpackhi_epi64(pairs[k + 1], pairs[k + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i low01 = _mm512_shuffle_i32x4(quads[m], quads[4 + m], 0x44);
    const __m512i high01 = _mm512_shuffle_i32x4(quads[m], quads[4 + m], 0xee);
    const __m512i low23 =
        _mm512_shuffle_i32x4(quads[8 + m], quads[12 + m], 0x44);
    const __m512i high23 =
        _mm512_shuffle_i32x4(quads[8 + m], quads[12 + m], 0xee);
    rows[m] = _mm512_shuffle_i32x4(low01, low23, 0x88);
    rows[4 + m] = _mm512_shuffle_i32x4(low01, low23, 0xdd);
    rows[8 + m] = _mm512_shuffle_i32x4(high01, high23, 0x88);
    rows[12 + m] = _mm512_shuffle_i32x4(high01, high23, 0xdd);
  }
}

/// 16 lanes of (even, odd) bf16 pairs from two vectors of f32, rounded to
/// nearest even: lane i holds even[i] in its low half and odd[i] in its
/// high half, AMX's order for the K pairs of a B tile (and of the A tiles
/// attention builds).
SPANC_AVX512BF16 inline __m512i interleaveBf16Pairs(__m512 even, __m512 odd) {
  // Words 0-15 of a cvtne2ps result are `even`, 16-31 `odd`.
  const __m512i interleave = _mm512_set_epi16(
      31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
      6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(
      interleave, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even)));
}

/// e^x for 16 lanes: 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2, p a
/// degree-7 Taylor polynomial (relative error below 1e-7 on that range).
/// Inputs below -87 give ~e^-87 (callers mask lanes that must be 0).
SPANC_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// The sum of 16 lanes in one fixed tree order,
///   ((x0+x8)+(x4+x12)) + ((x2+x10)+(x6+x14)) + ... i.e. lanes i + i+8,
///   then i + i+4, then i + i+2, then 0 + 1,
/// written out so that every build adds in the same order.
SPANC_AVX512 inline float sumLanes(__m512 values) {
  const __m256 eights = _mm256_add_ps(
      _mm512_castps512_ps256(values),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(values), 1)));
  const __m128 fours = _mm_add_ps(_mm256_castps256_ps128(eights),
                                  _mm256_extractf128_ps(eights, 1));
  const __m128 twos = _mm_add_ps(fours, _mm_movehl_ps(fours, fours));
  return _mm_cvtss_f32(_mm_add_ss(twos, _mm_movehdup_ps(twos)));
}

/// silu(gate) * up = gate / (1 + e^-gate) * up for 16 lanes: the SwiGLU of
/// the elementwise kernel and of the GEMM epilogue that fuses it, so that
/// both give the same bits.
SPANC_AVX512 inline __m512 swiGlu512(__m512 gate, __m512 up) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 sigmoid = _mm512_div_ps(
      one,
      _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gate))));
  return _mm512_mul_ps(_mm512_mul_ps(gate, sigmoid), up);
}

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_VECTORMATH_H
