//===- HostDevice.h - Arithmetic shared by the kernels and host tests -----===//
//
// Functions marked SPANC_HOST_DEVICE compile as __host__ __device__ under
// nvcc and as ordinary inline functions under the host compiler, so a
// kernel's per-element arithmetic is the very code a host test checks
// against the CPU kernels (the marker itself is FloatBits.h's, with the
// IEEE half conversion the whole runtime shares). Here: bf16, arithmetic
// rounded step by step, and K/V and activation loads and stores, written
// with integer operations only so both sides round identically (nearest,
// ties to even).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_HOSTDEVICE_H
#define SPANC_RUNTIME_KERNELS_CUDA_HOSTDEVICE_H

#include "runtime/kernels/FloatBits.h"

#include <cstdint>

namespace spanc::cuda {

/// The runtime's one half conversion and float bit casts (FloatBits.h).
using kernels::bitsToFloat;
using kernels::floatToBits;
using kernels::floatToHalf;
using kernels::halfToFloat;

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
