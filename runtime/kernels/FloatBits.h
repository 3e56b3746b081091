//===- FloatBits.h - Bit-exact float conversions, host and device ---------===//
//
// The one IEEE half <-> float conversion every part of the runtime uses: the
// CPU K/V cache (cpu/Half.h), the int8 decode GEMV's scales
// (cpu/QuantGemv.cpp), GGUF dequantization (model/Quantization.cpp) and the
// CUDA kernels (cuda/HostDevice.h). Integer operations only, so every
// caller rounds identically (nearest, ties to even) and a block written on
// one path reads the same bits on another. Functions marked
// SPANC_HOST_DEVICE compile as __host__ __device__ under nvcc and as plain
// inline functions under the host compiler.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_FLOATBITS_H
#define SPANC_RUNTIME_KERNELS_FLOATBITS_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPANC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPANC_HOST_DEVICE inline
#endif

namespace spanc::kernels {

SPANC_HOST_DEVICE float bitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

SPANC_HOST_DEVICE uint32_t floatToBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

/// The float an IEEE half holds (exact: every half is a float, subnormals,
/// infinities and NaN payloads included).
SPANC_HOST_DEVICE float halfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) // inf, NaN
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) // normal: rebias the exponent
    return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in f32 (a normal f32, so
  // flush-to-zero cannot touch it).
  const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

/// `value` rounded to the nearest half (ties to even); overflow gives inf,
/// NaN a quiet NaN.
SPANC_HOST_DEVICE uint16_t floatToHalf(float value) {
  const uint32_t bits = floatToBits(value);
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
  uint32_t result = (magnitude - 0x38000000u) >> 13;
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1)))
    ++result;
  return uint16_t(sign | result);
}

} // namespace spanc::kernels

#endif // SPANC_RUNTIME_KERNELS_FLOATBITS_H
