//===- HostDevice.h - Arithmetic shared by the kernels and host tests -----===//
//
// Functions marked SPANC_HOST_DEVICE compile as __host__ __device__ under
// nvcc and as ordinary inline functions under the host compiler, so a
// kernel's per-element arithmetic is the very code a host test checks
// against the CPU kernels. Here: the bit-exact conversions of K/V and
// activation elements (IEEE half, bf16), written with integer operations
// only so both sides round identically (nearest, ties to even).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_HOSTDEVICE_H
#define SPANC_RUNTIME_KERNELS_CUDA_HOSTDEVICE_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPANC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPANC_HOST_DEVICE inline
#endif

namespace spanc::cuda {

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

SPANC_HOST_DEVICE float bf16ToFloat(uint16_t bits) {
  return bitsToFloat(uint32_t(bits) << 16);
}

/// Round to nearest even; NaN stays a quiet NaN (model::floatToBf16).
SPANC_HOST_DEVICE uint16_t floatToBf16(float value) {
  uint32_t word = floatToBits(value);
  if ((word & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((word >> 16) | 0x40u);
  word += 0x7fffu + ((word >> 16) & 1u);
  return uint16_t(word >> 16);
}

/// The float an IEEE half holds (exact).
SPANC_HOST_DEVICE float halfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f)
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in f32.
  const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

/// `value` rounded to the nearest half (ties to even); overflow gives inf,
/// NaN a quiet NaN (cpu::floatToHalf's rounding).
SPANC_HOST_DEVICE uint16_t floatToHalf(float value) {
  const uint32_t bits = floatToBits(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)
    return uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  if (magnitude >= 0x477ff000u)
    return uint16_t(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    if (magnitude < 0x33000000u)
      return sign;
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1)))
      ++result;
    return uint16_t(sign | result);
  }
  uint32_t result = (magnitude - 0x38000000u) >> 13;
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1)))
    ++result;
  return uint16_t(sign | result);
}

/// Arithmetic nvcc may not contract into FMAs: where two kernels (or a
/// kernel and a host test) must produce the same bits from the same
/// inputs, each product and sum is rounded on its own.
SPANC_HOST_DEVICE float mulRounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SPANC_HOST_DEVICE float addRounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SPANC_HOST_DEVICE float divideRounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// K/V elements by storage type (float, or half bits in uint16_t).
SPANC_HOST_DEVICE float loadKv(const float *pointer) { return *pointer; }
SPANC_HOST_DEVICE float loadKv(const uint16_t *pointer) {
  return halfToFloat(*pointer);
}
SPANC_HOST_DEVICE void storeKv(float *pointer, float value) {
  *pointer = value;
}
SPANC_HOST_DEVICE void storeKv(uint16_t *pointer, float value) {
  *pointer = floatToHalf(value);
}

/// Activation outputs by type: f32, or bf16 bits in uint16_t.
SPANC_HOST_DEVICE void storeActivation(float *pointer, float value) {
  *pointer = value;
}
SPANC_HOST_DEVICE void storeActivation(uint16_t *pointer, float value) {
  *pointer = floatToBf16(value);
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_HOSTDEVICE_H
