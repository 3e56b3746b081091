//===- QuantGemv.cpp - Decode-size products with 4/8-bit GGUF weights -----===//

#include "runtime/kernels/cpu/QuantGemv.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace spanc::cpu {

namespace {

constexpr int kBlock = 32;
constexpr int kMaxTileRows = 4;

float halfToFloatScalar(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  uint32_t word;
  if (exponent == 0) {
    if (mantissa == 0) {
      word = sign;
    } else { // subnormal: renormalize
      int shift = 0;
      while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        ++shift;
      }
      word = sign | uint32_t(127 - 15 - shift + 1) << 23 |
             (mantissa & 0x3ff) << 13;
    }
  } else if (exponent == 31) {
    word = sign | 0x7f800000 | mantissa << 13;
  } else {
    word = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

/// The exact per-row result from integer block sums (the reference).
void gemvScalar(const QuantMatrix &weights, const QuantizedActivations &x,
                float *y, int64_t outputStride) {
  const int64_t blocks = weights.columns / kBlock;
  const int64_t blockBytes = quantBlockBytes(weights.format);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < weights.rows; ++row) {
    const uint8_t *rowData = weights.data + row * weights.rowBytes;
    for (int64_t r = 0; r < x.rows; ++r) {
      const int8_t *a = x.values.data() + r * x.columns;
      double total = 0;
      for (int64_t block = 0; block < blocks; ++block) {
        const uint8_t *data = rowData + block * blockBytes;
        float scale = halfToFloatScalar(data);
        float activationScale = x.scales[size_t(r * blocks + block)];
        int32_t activationSum = x.sums[size_t(r * blocks + block)];
        const int8_t *values = a + block * kBlock;
        int32_t dot = 0;
        if (weights.format == QuantFormat::Q4_1) {
          float minimum = halfToFloatScalar(data + 2);
          for (int i = 0; i < 16; ++i) {
            dot += int32_t(data[4 + i] & 0xf) * values[i];
            dot += int32_t(data[4 + i] >> 4) * values[i + 16];
          }
          total += double(scale) * activationScale * dot +
                   double(minimum) * activationScale * activationSum;
        } else {
          for (int i = 0; i < kBlock; ++i)
            dot += int32_t(int8_t(data[2 + i])) * values[i];
          total += double(scale) * activationScale * dot;
        }
      }
      y[r * outputStride + row] = float(total);
    }
  }
}

#define SPANC_VNNI                                                             \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,"       \
                        "f16c")))

SPANC_VNNI inline float halfToFloat(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  return _cvtsh_ss(bits);
}

/// The 64 weight bytes of blocks (block, block + 1) as u8 in activation
/// order, and each block's (scale, offset) where the offset multiplies the
/// activation block's scaled sum.
template <QuantFormat Format>
SPANC_VNNI inline __m512i
loadBlockPair(const uint8_t *first, const uint8_t *second, float *scale0,
              float *offset0, float *scale1, float *offset1) {
  if constexpr (Format == QuantFormat::Q4_1) {
    __m256i packed = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(first + 4))),
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(second + 4)), 1);
    const __m256i mask = _mm256_set1_epi8(0x0f);
    __m256i low = _mm256_and_si256(packed, mask);
    __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
    // [low0 low1 | high0 high1] -> [low0 high0 | low1 high1]
    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    *scale0 = halfToFloat(first);
    *offset0 = halfToFloat(first + 2);
    *scale1 = halfToFloat(second);
    *offset1 = halfToFloat(second + 2);
    return _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));
  } else {
    __m512i both = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(first + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(second + 2)), 1);
    *scale0 = halfToFloat(first);
    *scale1 = halfToFloat(second);
    *offset0 = -128.0f * *scale0;
    *offset1 = -128.0f * *scale1;
    return _mm512_xor_si512(both, _mm512_set1_epi8(char(0x80)));
  }
}

template <QuantFormat Format, int TileRows>
SPANC_VNNI void gemvRowsVnni(const QuantMatrix &weights,
                             const QuantizedActivations &x, int64_t firstRow,
                             float *y, int64_t outputStride) {
  const int64_t blocks = weights.columns / kBlock;
  const int64_t blockBytes = quantBlockBytes(Format);
  const int8_t *activations = x.values.data() + firstRow * x.columns;
  const float *activationScales = x.scales.data() + firstRow * blocks;
  const int32_t *activationSums = x.sums.data() + firstRow * blocks;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < weights.rows; ++row) {
    const uint8_t *rowData = weights.data + row * weights.rowBytes;
    __m512 accumulators[TileRows];
    float offsets[TileRows];
    for (int r = 0; r < TileRows; ++r) {
      accumulators[r] = _mm512_setzero_ps();
      offsets[r] = 0;
    }
    for (int64_t block = 0; block < blocks; block += 2) {
      const bool single = block + 1 == blocks;
      const uint8_t *first = rowData + block * blockBytes;
      // A lone last block pairs with itself; its twin's activations are 0.
      const uint8_t *second = single ? first : first + blockBytes;
      float scale0, offset0, scale1, offset1;
      __m512i packed = loadBlockPair<Format>(first, second, &scale0, &offset0,
                                             &scale1, &offset1);
      for (int r = 0; r < TileRows; ++r) {
        const int8_t *a = activations + r * x.columns + block * kBlock;
        __m512i values = single ? _mm512_zextsi256_si512(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i *>(a)))
                                : _mm512_loadu_si512(a);
        __m512i dot =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), packed, values);
        float scaleA0 = activationScales[r * blocks + block];
        float scaleA1 =
            single ? 0.0f : activationScales[r * blocks + block + 1];
        __m512 scales = _mm512_mask_blend_ps(__mmask16(0xff00),
                                             _mm512_set1_ps(scale0 * scaleA0),
                                             _mm512_set1_ps(scale1 * scaleA1));
        accumulators[r] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scales, accumulators[r]);
        offsets[r] +=
            offset0 * scaleA0 * float(activationSums[r * blocks + block]);
        if (!single)
          offsets[r] +=
              offset1 * scaleA1 * float(activationSums[r * blocks + block + 1]);
      }
    }
    for (int r = 0; r < TileRows; ++r)
      y[(firstRow + r) * outputStride + row] =
          _mm512_reduce_add_ps(accumulators[r]) + offsets[r];
  }
}

template <QuantFormat Format>
void gemvVnni(const QuantMatrix &weights, const QuantizedActivations &x,
              float *y, int64_t outputStride) {
  int64_t row = 0;
  for (; row + kMaxTileRows <= x.rows; row += kMaxTileRows)
    gemvRowsVnni<Format, kMaxTileRows>(weights, x, row, y, outputStride);
  switch (x.rows - row) {
  case 3:
    gemvRowsVnni<Format, 3>(weights, x, row, y, outputStride);
    break;
  case 2:
    gemvRowsVnni<Format, 2>(weights, x, row, y, outputStride);
    break;
  case 1:
    gemvRowsVnni<Format, 1>(weights, x, row, y, outputStride);
    break;
  default:
    break;
  }
}

} // namespace

bool hasQuantGemvKernel() {
  const CpuFeatures &features = cpuFeatures();
  return features.hasAvx512() && features.avx512vnni;
}

void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantizedActivations &out) {
  const int64_t blocks = k / kBlock;
  out.rows = m;
  out.columns = k;
  out.values.resize(size_t(m * k));
  out.scales.resize(size_t(m * blocks));
  out.sums.resize(size_t(m * blocks));
  for (int64_t row = 0; row < m; ++row)
    for (int64_t block = 0; block < blocks; ++block) {
      const float *source = x + row * stride + block * kBlock;
      float maximum = 0;
      for (int i = 0; i < kBlock; ++i)
        maximum = std::max(maximum, std::abs(source[i]));
      float scale = maximum / 127.0f;
      float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      int8_t *values = out.values.data() + row * k + block * kBlock;
      int32_t sum = 0;
      for (int i = 0; i < kBlock; ++i) {
        values[i] = int8_t(std::nearbyint(source[i] * inverse));
        sum += values[i];
      }
      out.scales[size_t(row * blocks + block)] = scale;
      out.sums[size_t(row * blocks + block)] = sum;
    }
}

void quantGemv(const QuantMatrix &weights, const QuantizedActivations &x,
               float *y, int64_t outputStride, bool forceScalar) {
  if (forceScalar || !hasQuantGemvKernel()) {
    gemvScalar(weights, x, y, outputStride);
    return;
  }
  if (weights.format == QuantFormat::Q4_1)
    gemvVnni<QuantFormat::Q4_1>(weights, x, y, outputStride);
  else
    gemvVnni<QuantFormat::Q8_0>(weights, x, y, outputStride);
}

} // namespace spanc::cpu
