//===- Quantization.cpp - ggml type geometry and row dequantization -------===//

#include "runtime/model/Quantization.h"

#include "runtime/kernels/FloatBits.h"

#include "llvm/ADT/Twine.h"

#include <array>
#include <cassert>
#include <cmath>
#include <cstring>

namespace spanc::model {

namespace {

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block geometry of every ggml type, including those we cannot dequantize,
// so that any valid GGUF file can be sized and validated.
constexpr TypeEntry typeTable[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 18}},      {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},    {11, {"Q3_K", 256, 110}},
    {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},
    {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},   {23, {"IQ4_XS", 256, 136}},
    {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},        {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
    {40, {"NVFP4", 64, 36}},    {41, {"Q1_0", 128, 18}},
    {42, {"Q2_0", 64, 18}},
};

// f16 -> f32 for all 65536 bit patterns, built once from the runtime's one
// conversion (runtime/kernels/FloatBits.h); dequantization then costs one
// load per scale instead of bit fiddling.
const float *halfTable() {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> values{};
    for (uint32_t bits = 0; bits < 65536; ++bits)
      values[bits] = kernels::halfToFloat(uint16_t(bits));
    return values;
  }();
  return table.data();
}

inline uint16_t load16(const uint8_t *bytes) {
  return static_cast<uint16_t>(bytes[0] | (bytes[1] << 8));
}

// Q4_0: f16 scale d, then 16 bytes: element j is the low nibble of byte j,
// element j + 16 the high nibble, both offset by 8.
void dequantizeQ4_0(const uint8_t *src, float *dst, int64_t blocks,
                    const float *half) {
  for (int64_t block = 0; block < blocks; ++block, src += 18, dst += 32) {
    float scale = half[load16(src)];
    const uint8_t *quants = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((quants[j] & 0x0f) - 8) * scale;
      dst[j + 16] = static_cast<float>((quants[j] >> 4) - 8) * scale;
    }
  }
}

// Q4_1: f16 scale d and f16 minimum m, then nibbles as in Q4_0, unsigned:
// x = q * d + m.
void dequantizeQ4_1(const uint8_t *src, float *dst, int64_t blocks,
                    const float *half) {
  for (int64_t block = 0; block < blocks; ++block, src += 20, dst += 32) {
    float scale = half[load16(src)];
    float minimum = half[load16(src + 2)];
    const uint8_t *quants = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(quants[j] & 0x0f) * scale + minimum;
      dst[j + 16] = static_cast<float>(quants[j] >> 4) * scale + minimum;
    }
  }
}

// Q8_0: f16 scale d, then 32 signed bytes.
void dequantizeQ8_0(const uint8_t *src, float *dst, int64_t blocks,
                    const float *half) {
  for (int64_t block = 0; block < blocks; ++block, src += 34, dst += 32) {
    float scale = half[load16(src)];
    const int8_t *quants = reinterpret_cast<const int8_t *>(src + 2);
    for (int j = 0; j < 32; ++j)
      dst[j] = static_cast<float>(quants[j]) * scale;
  }
}

// Q4_K: a 256-element super-block of eight 32-element sub-blocks. f16 d and
// dmin, 12 bytes of packed 6-bit (scale, min) pairs, 128 bytes of nibbles.
// Sub-block pair (2i, 2i+1) shares 32 bytes: low nibbles, then high nibbles.
void dequantizeQ4_K(const uint8_t *src, float *dst, int64_t blocks,
                    const float *half) {
  for (int64_t block = 0; block < blocks; ++block, src += 144, dst += 256) {
    float superScale = half[load16(src)];
    float superMin = half[load16(src + 2)];
    const uint8_t *packed = src + 4;
    const uint8_t *quants = src + 16;
    uint8_t scales[8], minimums[8];
    for (int j = 0; j < 4; ++j) {
      scales[j] = packed[j] & 63;
      minimums[j] = packed[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
      scales[j] = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
      minimums[j] = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
    for (int pair = 0; pair < 4; ++pair) {
      const uint8_t *bytes = quants + 32 * pair;
      float *out = dst + 64 * pair;
      float lowScale = superScale * scales[2 * pair];
      float lowMin = superMin * minimums[2 * pair];
      float highScale = superScale * scales[2 * pair + 1];
      float highMin = superMin * minimums[2 * pair + 1];
      for (int j = 0; j < 32; ++j) {
        out[j] = lowScale * static_cast<float>(bytes[j] & 0x0f) - lowMin;
        out[j + 32] = highScale * static_cast<float>(bytes[j] >> 4) - highMin;
      }
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, sixteen
// int8 sub-block scales (16 elements each) and an f16 d. Values are 6-bit,
// offset by 32. Each 128-element half uses 64 low bytes and 32 high bytes.
void dequantizeQ6_K(const uint8_t *src, float *dst, int64_t blocks,
                    const float *half) {
  for (int64_t block = 0; block < blocks; ++block, src += 210, dst += 256) {
    const uint8_t *low = src;
    const uint8_t *high = src + 128;
    const int8_t *scales = reinterpret_cast<const int8_t *>(src + 192);
    float superScale = half[load16(src + 208)];
    for (int halfBlock = 0; halfBlock < 2; ++halfBlock) {
      float *out = dst + 128 * halfBlock;
      for (int j = 0; j < 32; ++j) {
        int group = j / 16;
        int q0 = ((low[j] & 0x0f) | ((high[j] & 3) << 4)) - 32;
        int q1 = ((low[j + 32] & 0x0f) | (((high[j] >> 2) & 3) << 4)) - 32;
        int q2 = ((low[j] >> 4) | (((high[j] >> 4) & 3) << 4)) - 32;
        int q3 = ((low[j + 32] >> 4) | (((high[j] >> 6) & 3) << 4)) - 32;
        out[j] = superScale * scales[group] * q0;
        out[j + 32] = superScale * scales[group + 2] * q1;
        out[j + 64] = superScale * scales[group + 4] * q2;
        out[j + 96] = superScale * scales[group + 6] * q3;
      }
      low += 64;
      high += 32;
      scales += 8;
    }
  }
}

} // namespace

GgmlTypeTraits ggmlTypeTraits(uint32_t typeId) {
  for (const TypeEntry &entry : typeTable)
    if (entry.id == typeId)
      return entry.traits;
  return {};
}

std::string ggmlTypeName(GgmlType type) {
  GgmlTypeTraits traits = ggmlTypeTraits(type);
  if (traits.blockSize == 0)
    return "type#" + std::to_string(static_cast<uint32_t>(type));
  return traits.name.str();
}

bool canDequantize(GgmlType type) {
  switch (type) {
  case GgmlType::F32:
  case GgmlType::F16:
  case GgmlType::BF16:
  case GgmlType::Q8_0:
  case GgmlType::Q4_0:
  case GgmlType::Q4_1:
  case GgmlType::Q4_K:
  case GgmlType::Q6_K:
    return true;
  default:
    return false;
  }
}

llvm::Error checkDequantizable(GgmlType type, int64_t count) {
  if (!canDequantize(type))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "tensor type " + ggmlTypeName(type) + " cannot be dequantized (" +
            "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
  uint32_t blockSize = ggmlTypeTraits(type).blockSize;
  if (count < 0 || count % blockSize != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::Twine("a row of ") + llvm::Twine(count) + " elements is not " +
            "a whole number of " + ggmlTypeName(type) + " blocks of " +
            llvm::Twine(blockSize));
  return llvm::Error::success();
}

void dequantizeRow(GgmlType type, const void *src, float *dst, int64_t count) {
  assert(canDequantize(type) && "unsupported type");
  assert(count % ggmlTypeTraits(type).blockSize == 0 && "partial block");
  const uint8_t *bytes = static_cast<const uint8_t *>(src);
  const float *half = halfTable();
  switch (type) {
  case GgmlType::F32:
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
    return;
  case GgmlType::F16:
    for (int64_t i = 0; i < count; ++i)
      dst[i] = half[load16(bytes + 2 * i)];
    return;
  case GgmlType::BF16:
    for (int64_t i = 0; i < count; ++i)
      dst[i] = bf16ToFloat(load16(bytes + 2 * i));
    return;
  case GgmlType::Q4_0:
    return dequantizeQ4_0(bytes, dst, count / 32, half);
  case GgmlType::Q4_1:
    return dequantizeQ4_1(bytes, dst, count / 32, half);
  case GgmlType::Q8_0:
    return dequantizeQ8_0(bytes, dst, count / 32, half);
  case GgmlType::Q4_K:
    return dequantizeQ4_K(bytes, dst, count / 256, half);
  case GgmlType::Q6_K:
    return dequantizeQ6_K(bytes, dst, count / 256, half);
  default:
    assert(false && "unsupported type");
  }
}

void convertRowToBf16(GgmlType type, const void *src, uint16_t *dst,
                      int64_t count) {
  const uint8_t *bytes = static_cast<const uint8_t *>(src);
  if (type == GgmlType::BF16) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(uint16_t));
    return;
  }
  // Every supported block size divides 256, so chunks of 256 elements stay
  // on block boundaries; the f32 staging buffer stays in L1.
  constexpr int64_t chunk = 256;
  float staging[chunk];
  GgmlTypeTraits traits = ggmlTypeTraits(type);
  for (int64_t start = 0; start < count; start += chunk) {
    int64_t length = std::min(chunk, count - start);
    const uint8_t *chunkSource =
        bytes + start / traits.blockSize * traits.blockBytes;
    dequantizeRow(type, chunkSource, staging, length);
    for (int64_t i = 0; i < length; ++i)
      dst[start + i] = floatToBf16(staging[i]);
  }
}

float halfToFloat(uint16_t bits) { return halfTable()[bits]; }

// Not kernels::floatToHalf, which quiets a NaN to one pattern: a GGUF
// writer keeps a NaN's payload, so every half survives a round trip.
uint16_t floatToHalf(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000);
  uint32_t magnitude = word & 0x7fffffff;
  if (magnitude >= 0x7f800000) // infinity or NaN (kept quiet, payload kept)
    return sign |
           (magnitude > 0x7f800000
                ? static_cast<uint16_t>(0x7e00 | ((magnitude >> 13) & 0x3ff))
                : 0x7c00);
  if (magnitude >= 0x477ff000) // >= 65520 rounds to infinity
    return sign | 0x7c00;
  if (magnitude < 0x38800000) { // below 2^-14: a subnormal half (or 0)
    float absolute;
    std::memcpy(&absolute, &magnitude, sizeof(absolute));
    // The default rounding mode rounds half to even; 1024 is the smallest
    // normal, whose encoding is exactly 0x0400.
    return sign | static_cast<uint16_t>(std::nearbyint(absolute * 16777216.0f));
  }
  uint32_t half = (magnitude >> 13) - (112u << 10);
  uint32_t rest = magnitude & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;
  return sign | static_cast<uint16_t>(half);
}

uint16_t floatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((word >> 16) | 0x40);
  word += 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>(word >> 16);
}

} // namespace spanc::model
