//===- DequantizeMath.h - One element of a GGUF block ---------------------===//
//
// The value of element `index` of one block of each type the device
// dequantizes, as SPANC_HOST_DEVICE functions (a thread per element on the
// GPU; a host test compares every element with model::dequantizeRow). The
// layouts are ggml's documented block formats, read byte by byte since
// blocks of 18, 20, 34, 144 and 210 bytes are not aligned. Products use
// mulRounded so nvcc does not fuse them into the following add: the values
// are then the CPU's bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZEMATH_H
#define SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZEMATH_H

#include "runtime/kernels/cuda/HostDevice.h"

#include <cstdint>

namespace spanc::cuda {

SPANC_HOST_DEVICE uint16_t loadLittle16(const uint8_t *bytes) {
  return uint16_t(bytes[0] | (bytes[1] << 8));
}

SPANC_HOST_DEVICE float loadHalfScale(const uint8_t *bytes) {
  return halfToFloat(loadLittle16(bytes));
}

/// Q4_0 (32 elements, 18 bytes): f16 d, 16 bytes; element j < 16 is the
/// low nibble of byte j, j >= 16 the high nibble of byte j - 16; (q - 8) d.
SPANC_HOST_DEVICE float dequantizeQ4_0Element(const uint8_t *block, int index) {
  const uint8_t byte = block[2 + (index & 15)];
  const int quant = (index < 16 ? (byte & 0x0f) : (byte >> 4)) - 8;
  return mulRounded(float(quant), loadHalfScale(block));
}

/// Q4_1 (32 elements, 20 bytes): f16 d and m, nibbles as Q4_0; q d + m.
SPANC_HOST_DEVICE float dequantizeQ4_1Element(const uint8_t *block, int index) {
  const uint8_t byte = block[4 + (index & 15)];
  const int quant = index < 16 ? (byte & 0x0f) : (byte >> 4);
  return mulRounded(float(quant), loadHalfScale(block)) +
         loadHalfScale(block + 2);
}

/// Q8_0 (32 elements, 34 bytes): f16 d, 32 signed bytes; q d.
SPANC_HOST_DEVICE float dequantizeQ8_0Element(const uint8_t *block, int index) {
  return mulRounded(float(int8_t(block[2 + index])), loadHalfScale(block));
}

/// Q4_K (256 elements, 144 bytes): f16 d and dmin, 12 bytes of 6-bit
/// (scale, min) pairs for eight 32-element sub-blocks, 128 bytes of
/// nibbles; sub-blocks 2p and 2p+1 share bytes 32p.. (low, high nibbles).
/// x = (d sc) q - (dmin m).
SPANC_HOST_DEVICE float dequantizeQ4_KElement(const uint8_t *block, int index) {
  const uint8_t *packed = block + 4;
  const int sub = index / 32;
  int scale, minimum;
  if (sub < 4) {
    scale = packed[sub] & 63;
    minimum = packed[sub + 4] & 63;
  } else {
    scale = (packed[sub + 4] & 0x0f) | ((packed[sub - 4] >> 6) << 4);
    minimum = (packed[sub + 4] >> 4) | ((packed[sub] >> 6) << 4);
  }
  const uint8_t byte = block[16 + 32 * (sub / 2) + index % 32];
  const int quant = sub % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
  const float subScale = mulRounded(loadHalfScale(block), float(scale));
  const float subMin = mulRounded(loadHalfScale(block + 2), float(minimum));
  return mulRounded(subScale, float(quant)) - subMin;
}

/// Q6_K (256 elements, 210 bytes): 128 bytes of low nibbles, 64 bytes of
/// 2-bit high parts, sixteen int8 scales, f16 d; 6-bit values offset by
/// 32. Each 128-element half uses 64 low bytes, 32 high bytes, 8 scales;
/// its quarter k holds elements 32k.. of the half. x = (d scale) q.
SPANC_HOST_DEVICE float dequantizeQ6_KElement(const uint8_t *block, int index) {
  const int half = index / 128, quarter = index % 128 / 32, j = index % 32;
  const uint8_t *low = block + 64 * half;
  const uint8_t *high = block + 128 + 32 * half;
  const int8_t *scales =
      reinterpret_cast<const int8_t *>(block + 192) + 8 * half;
  const uint8_t lowByte = low[j + (quarter % 2) * 32];
  const int lowBits = quarter < 2 ? (lowByte & 0x0f) : (lowByte >> 4);
  const int highBits = (high[j] >> (2 * quarter)) & 3;
  const int quant = (lowBits | (highBits << 4)) - 32;
  const float scale = mulRounded(loadHalfScale(block + 208),
                                 float(scales[j / 16 + 2 * quarter]));
  return mulRounded(scale, float(quant));
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZEMATH_H
