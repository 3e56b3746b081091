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
constexpr int kPairValues = 64;
constexpr int kMaxTileRows = 4;

/// Where value `index` (0..31) of block `half` (0, 1) of a pair goes in the
/// interleaved order: 4-value chunks alternate between the two blocks.
inline int interleavedPosition(int half, int index) {
  return (index / 4) * 8 + half * 4 + index % 4;
}

float halfToFloatScalar(uint16_t bits) {
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

uint16_t readHalf(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  return bits;
}

/// The exact per-row result from the packed integers (the reference).
void gemvScalar(const PackedQuantMatrix &weights, const QuantizedActivations &x,
                float *y, int64_t outputStride) {
  const bool q41 = weights.format == QuantFormat::Q4_1;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < weights.rows; ++row) {
    const uint8_t *rowData = weights.bytes.data() + row * weights.rowBytes;
    for (int64_t r = 0; r < x.rows; ++r) {
      double total = 0;
      for (int64_t pair = 0; pair < weights.pairs; ++pair) {
        const uint8_t *data =
            rowData + pair * PackedQuantMatrix::pairBytes(weights.format);
        const int8_t *a = x.values.data() + (r * x.pairs + pair) * kPairValues;
        int32_t dots[2] = {0, 0};
        for (int position = 0; position < kPairValues; ++position) {
          int half = (position / 4) % 2;
          int32_t weight = q41 ? (position < 32 ? data[position] & 0xf
                                                : data[position - 32] >> 4)
                               : int32_t(data[position]);
          dots[half] += weight * a[position];
        }
        const uint8_t *scales = data + (q41 ? 32 : 64);
        for (int half = 0; half < 2; ++half) {
          size_t block = size_t((r * x.pairs + pair) * 2 + half);
          double scale = halfToFloatScalar(readHalf(scales + 2 * half));
          double offset =
              q41 ? halfToFloatScalar(readHalf(scales + 4 + 2 * half))
                  : -128.0 * scale;
          total += scale * x.scales[block] * dots[half] +
                   offset * x.scaledSums[block];
        }
      }
      y[r * outputStride + row] = float(total);
    }
  }
}

#define SPANC_VNNI                                                             \
  __attribute__((                                                              \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

/// Two f16 values at `bytes` as floats in lanes 0 and 1.
SPANC_VNNI inline __m128 loadHalfPair(const uint8_t *bytes) {
  int32_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
}

SPANC_VNNI inline __m128 loadFloatPair(const float *values) {
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double *>(values)));
}

template <QuantFormat Format, int TileRows>
SPANC_VNNI void gemvRowsVnni(const PackedQuantMatrix &weights,
                             const QuantizedActivations &x, int64_t firstRow,
                             float *y, int64_t outputStride) {
  constexpr int64_t pairBytes = PackedQuantMatrix::pairBytes(Format);
  const int64_t pairs = weights.pairs;
  const int8_t *activations = x.values.data() + firstRow * pairs * kPairValues;
  const float *activationScales = x.scales.data() + firstRow * pairs * 2;
  const float *activationSums = x.scaledSums.data() + firstRow * pairs * 2;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < weights.rows; ++row) {
    const uint8_t *data = weights.bytes.data() + row * weights.rowBytes;
    __m512 accumulators[TileRows];
    __m128 offsets[TileRows];
    for (int r = 0; r < TileRows; ++r) {
      accumulators[r] = _mm512_setzero_ps();
      offsets[r] = _mm_setzero_ps();
    }
    for (int64_t pair = 0; pair < pairs; ++pair, data += pairBytes) {
      __m512i packed;
      __m128 scales, pairOffsets;
      if constexpr (Format == QuantFormat::Q4_1) {
        __m256i nibbles =
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(data));
        const __m256i mask = _mm256_set1_epi8(0x0f);
        packed = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_and_si256(nibbles, mask)),
            _mm256_and_si256(_mm256_srli_epi16(nibbles, 4), mask), 1);
        scales = loadHalfPair(data + 32);
        pairOffsets = loadHalfPair(data + 36);
      } else {
        packed = _mm512_loadu_si512(data);
        scales = loadHalfPair(data + 64);
        pairOffsets = _mm_mul_ps(scales, _mm_set1_ps(-128.0f));
      }
      for (int r = 0; r < TileRows; ++r) {
        const int64_t index = r * pairs + pair;
        __m512i dot = _mm512_dpbusd_epi32(
            _mm512_setzero_si512(), packed,
            _mm512_loadu_si512(activations + index * kPairValues));
        // Even lanes hold block 0 of the pair, odd lanes block 1.
        __m512 combined = _mm512_broadcast_f32x2(
            _mm_mul_ps(scales, loadFloatPair(activationScales + index * 2)));
        accumulators[r] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), combined, accumulators[r]);
        offsets[r] = _mm_fmadd_ps(
            pairOffsets, loadFloatPair(activationSums + index * 2), offsets[r]);
      }
    }
    for (int r = 0; r < TileRows; ++r) {
      __m128 offset = offsets[r];
      y[(firstRow + r) * outputStride + row] =
          _mm512_reduce_add_ps(accumulators[r]) + _mm_cvtss_f32(offset) +
          _mm_cvtss_f32(_mm_movehdup_ps(offset));
    }
  }
}

template <QuantFormat Format>
void gemvVnni(const PackedQuantMatrix &weights, const QuantizedActivations &x,
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

PackedQuantMatrix packQuantMatrix(const QuantMatrix &matrix) {
  PackedQuantMatrix packed;
  packed.format = matrix.format;
  packed.rows = matrix.rows;
  packed.columns = matrix.columns;
  const int64_t blocks = matrix.columns / kBlock;
  packed.pairs = (blocks + 1) / 2;
  const int64_t pairBytes = PackedQuantMatrix::pairBytes(matrix.format);
  packed.rowBytes = packed.pairs * pairBytes;
  packed.bytes.assign(size_t(packed.rows * packed.rowBytes), 0);
  const int64_t blockBytes = quantBlockBytes(matrix.format);
  const bool q41 = matrix.format == QuantFormat::Q4_1;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < matrix.rows; ++row) {
    const uint8_t *source = matrix.data + row * matrix.rowBytes;
    uint8_t *destination = packed.bytes.data() + row * packed.rowBytes;
    for (int64_t block = 0; block < blocks; ++block) {
      const uint8_t *in = source + block * blockBytes;
      uint8_t *pair = destination + (block / 2) * pairBytes;
      int half = int(block % 2);
      for (int index = 0; index < kBlock; ++index) {
        int position = interleavedPosition(half, index);
        if (q41) {
          uint8_t value =
              index < 16 ? in[4 + index] & 0xf : in[4 + index - 16] >> 4;
          if (position < 32)
            pair[position] |= value;
          else
            pair[position - 32] |= uint8_t(value << 4);
        } else {
          pair[position] = uint8_t(int(int8_t(in[2 + index])) + 128);
        }
      }
      // Scales (and Q4_1 minimums) stay f16; a padding block keeps 0.
      uint8_t *scales = pair + (q41 ? 32 : 64);
      std::memcpy(scales + 2 * half, in, 2);
      if (q41)
        std::memcpy(scales + 4 + 2 * half, in + 2, 2);
    }
  }
  return packed;
}

float roundToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t sign = bits & 0x80000000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) // inf, NaN
    return value;
  if (magnitude >= 0x477ff000u) { // rounds past 65504: inf
    uint32_t infinity = sign | 0x7f800000u;
    float result;
    std::memcpy(&result, &infinity, sizeof(result));
    return result;
  }
  // The spacing of f16 values near `value`: 2^(e-10) for normals, 2^-24
  // below 2^-14; adding and subtracting 1.5 * 2^23 ulps rounds to it (ties
  // to even) in f32 arithmetic.
  int exponent = int(magnitude >> 23) - 127;
  int quantumExponent = std::max(exponent, -14) - 10;
  float quantum = std::ldexp(1.0f, quantumExponent);
  float absolute;
  std::memcpy(&absolute, &magnitude, sizeof(absolute));
  float rounded = std::nearbyint(absolute / quantum) * quantum;
  uint32_t roundedBits;
  std::memcpy(&roundedBits, &rounded, sizeof(roundedBits));
  roundedBits |= sign;
  float result;
  std::memcpy(&result, &roundedBits, sizeof(result));
  return result;
}

void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantFormat format, QuantizedActivations &out) {
  const int64_t blocks = k / kBlock;
  out.rows = m;
  out.columns = k;
  out.pairs = (blocks + 1) / 2;
  out.values.assign(size_t(m * out.pairs * kPairValues), 0);
  out.scales.assign(size_t(m * out.pairs * 2), 0.0f);
  out.scaledSums.assign(size_t(m * out.pairs * 2), 0.0f);
  for (int64_t row = 0; row < m; ++row)
    for (int64_t block = 0; block < blocks; ++block) {
      const float *source = x + row * stride + block * kBlock;
      float maximum = 0;
      for (int i = 0; i < kBlock; ++i)
        maximum = std::max(maximum, std::abs(source[i]));
      float scale = maximum / 127.0f;
      // As ggml's x86 Q8 quantizers: multiply by 127 / max, round to even.
      float inverse = maximum > 0 ? 127.0f / maximum : 0.0f;
      int8_t *pair =
          out.values.data() + (row * out.pairs + block / 2) * kPairValues;
      int half = int(block % 2);
      int32_t sum = 0;
      for (int i = 0; i < kBlock; ++i) {
        int8_t value = int8_t(std::nearbyint(source[i] * inverse));
        pair[interleavedPosition(half, i)] = value;
        sum += value;
      }
      size_t index = size_t(row * out.pairs * 2 + block);
      // ggml keeps d = max/127 in f16; Q8_1 also keeps s = d * sum in f16,
      // and Q8_0 blocks (dotted signed x signed) need none.
      out.scales[index] = roundToHalf(scale);
      out.scaledSums[index] = format == QuantFormat::Q4_1
                                  ? roundToHalf(scale * float(sum))
                                  : out.scales[index] * float(sum);
    }
}

void quantGemv(const PackedQuantMatrix &weights, const QuantizedActivations &x,
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
