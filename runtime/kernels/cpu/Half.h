//===- Half.h - IEEE half (f16) K/V elements: conversions and loads -------===//
//
// The paged KV cache stores K and V as IEEE binary16 by default (what
// llama.cpp's default f16 cache holds): half the bytes of f32 for every
// attention read, relocation and copy-on-write. Kernels convert on the fly:
// 16 lanes at a time with the AVX-512 conversions (F16C, implied by
// AVX-512F), 8 with F16C on the AVX2 path, one value at a time with the
// portable routines of runtime/kernels/FloatBits.h (scalar reference paths; the
// build targets generic x86-64, so no F16C there). Both round to nearest, ties
// to even, so every path stores the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_HALF_H
#define SPANC_RUNTIME_KERNELS_CPU_HALF_H

#include "runtime/kernels/FloatBits.h"
#include "runtime/kernels/cpu/VectorMath.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <cstdint>

namespace spanc::cpu {

/// How K/V elements are stored: f32, or IEEE half in a uint16_t.
enum class KvPrecision { F32, F16 };

inline int kvElementBytes(KvPrecision precision) {
  return precision == KvPrecision::F16 ? 2 : 4;
}

/// The one conversion (FloatBits.h): the scalar paths and the CUDA
/// kernels store and read the same bits.
using kernels::floatToHalf;
using kernels::halfToFloat;

/// One element as float, for code templated on the storage type.
inline float loadElement(const float *pointer) { return *pointer; }
inline float loadElement(const uint16_t *pointer) {
  return halfToFloat(*pointer);
}
inline void storeElement(float *pointer, float value) { *pointer = value; }
inline void storeElement(uint16_t *pointer, float value) {
  *pointer = floatToHalf(value);
}

/// 16 consecutive elements as 16 float lanes.
SPANC_AVX512 inline __m512 load16(const float *pointer) {
  return _mm512_loadu_ps(pointer);
}
SPANC_AVX512 inline __m512 load16(const uint16_t *pointer) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pointer)));
}
/// The lanes of `mask` (others zero).
SPANC_AVX512 inline __m512 load16(__mmask16 mask, const float *pointer) {
  return _mm512_maskz_loadu_ps(mask, pointer);
}
SPANC_AVX512 inline __m512 load16(__mmask16 mask, const uint16_t *pointer) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, pointer));
}

SPANC_AVX512 inline void store16(float *pointer, __m512 value) {
  _mm512_storeu_ps(pointer, value);
}
SPANC_AVX512 inline void store16(uint16_t *pointer, __m512 value) {
  _mm256_storeu_si256(
      reinterpret_cast<__m256i *>(pointer),
      _mm512_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
SPANC_AVX512 inline void store16(__mmask16 mask, float *pointer, __m512 value) {
  _mm512_mask_storeu_ps(pointer, mask, value);
}
SPANC_AVX512 inline void store16(__mmask16 mask, uint16_t *pointer,
                                 __m512 value) {
  _mm256_mask_storeu_epi16(
      pointer, mask,
      _mm512_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/// Eight elements as f32 lanes, and back (the AVX2 path: F16C).
SPANC_AVX2 inline __m256 load8(const float *pointer) {
  return _mm256_loadu_ps(pointer);
}
SPANC_AVX2 inline __m256 load8(const uint16_t *pointer) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(pointer)));
}
SPANC_AVX2 inline void store8(float *pointer, __m256 value) {
  _mm256_storeu_ps(pointer, value);
}
SPANC_AVX2 inline void store8(uint16_t *pointer, __m256 value) {
  _mm_storeu_si128(reinterpret_cast<__m128i *>(pointer),
                   _mm256_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT));
}

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_HALF_H
