//===- Half.h - IEEE half (f16) K/V elements: conversions and loads -------===//
//
// The paged KV cache stores K and V as IEEE binary16 by default (what
// llama.cpp's default f16 cache holds): half the bytes of f32 for every
// attention read, relocation and copy-on-write. Kernels convert on the fly:
// 16 lanes at a time with the AVX-512 conversions (F16C, implied by
// AVX-512F), one value at a time with the portable routines below (scalar
// reference paths; the build targets generic x86-64, so no F16C there).
// Both round to nearest, ties to even, so every path stores the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_HALF_H
#define SPANC_RUNTIME_KERNELS_CPU_HALF_H

#include "runtime/kernels/cpu/VectorMath.h"

#include <cstdint>
#include <cstring>

namespace spanc::cpu {

/// How K/V elements are stored: f32, or IEEE half in a uint16_t.
enum class KvPrecision { F32, F16 };

inline int kvElementBytes(KvPrecision precision) {
  return precision == KvPrecision::F16 ? 2 : 4;
}

/// The float a half holds (exact: every half is a float).
inline float halfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) { // inf, NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) { // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) { // zero
    bits = sign;
  } else { // subnormal: normalize
    exponent = 113;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// `value` rounded to the nearest half (ties to even); overflow gives inf,
/// NaN stays NaN (quiet).
inline uint16_t floatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) // inf, NaN
    return uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  if (magnitude >= 0x477ff000u) // rounds past 65504
    return uint16_t(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { // below 2^-14: subnormal half (or zero)
    if (magnitude < 0x33000000u) // below half of the smallest subnormal
      return sign;
    // The value in units of 2^-24, rounded to nearest even.
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent; // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1)))
      ++result;
    return uint16_t(sign | result);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits (a
  // carry into the exponent is the correct result).
  uint32_t result = ((magnitude - 0x38000000u) >> 13);
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1)))
    ++result;
  return uint16_t(sign | result);
}

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

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_HALF_H
