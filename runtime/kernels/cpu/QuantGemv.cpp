//===- QuantGemv.cpp - Decode-size products with 4/8-bit GGUF weights -----===//

#include "runtime/kernels/cpu/QuantGemv.h"

#include "runtime/kernels/cpu/QuantGemvInternal.h"

#include "runtime/kernels/FloatBits.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"

// GCC 12 reports its own AVX-512 conversion/reduction intrinsics (which
// start from an "undefined" vector on purpose) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace spanc::cpu {

namespace quantgemv {

bool prefetchWeightsToL2() {
  static const bool toL2 = cpuFeatures().amd;
  return toL2;
}

bool avx2Handles(const PackedQuantMatrix &weights) {
  return !weights.hasLowestQ80Value;
}

} // namespace quantgemv

namespace {

using namespace quantgemv;

/// Which kernel multiplies a matrix: VNNI where AVX-512 has it, else AVX2
/// (which a Q8_0 weight of -128 sends to the portable path), else the
/// portable reference. All three give the same bits.
enum class GemvPath { Portable, Avx2, Vnni };

bool hasVnniKernel() {
  const CpuFeatures &features = cpuFeatures();
  return features.hasAvx512() && features.avx512vnni;
}

bool hasAvx2Kernel() {
  const CpuFeatures &features = cpuFeatures();
  return features.avx2 && features.fma && features.f16c;
}

GemvPath gemvPath(const PackedQuantMatrix &weights) {
  if (hasVnniKernel())
    return GemvPath::Vnni;
  if (hasAvx2Kernel() && avx2Handles(weights))
    return GemvPath::Avx2;
  return GemvPath::Portable;
}

constexpr int kMaxTileRows = 4;

using namespace quantlayout;

uint16_t readHalf(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  return bits;
}

/// Where value `index` (0..31) of row lane `lane` goes in a tile.
inline int64_t q80Position(int lane, int index) {
  return (index / 4) * 64 + lane * 4 + index % 4;
}
/// Q4_1: the byte and nibble of value `index` of lane `lane`.
inline int64_t q41Byte(int lane, int index) {
  return (index / 8) * 64 + lane * 4 + index % 4;
}
inline int q41Shift(int index) { return (index / 4) % 2 ? 4 : 0; }

/// The reference: every output's blocks folded in order, as the VNNI path,
/// for weight rows [firstRow, endRow).
void gemvScalarRows(const PackedQuantMatrix &weights,
                    const QuantizedActivations &x, float *y,
                    int64_t outputStride, int64_t firstRow, int64_t endRow) {
  const bool q41 = weights.format == QuantFormat::Q4_1;
  for (int64_t row = firstRow; row < endRow; ++row) {
    const int64_t group = row / kGroupRows;
    const int lane = int(row % kGroupRows);
    for (int64_t r = 0; r < x.rows; ++r) {
      float accumulator = 0.0f;
      for (int64_t block = 0; block < weights.blocks; ++block) {
        const uint8_t *tile =
            weights.bytes.data() +
            valuesOffset(weights.format, weights.blocks, group, block);
        const uint8_t *scales =
            weights.bytes.data() +
            scalesOffset(weights.format, weights.blocks, group, block);
        const uint8_t *a = x.values.data() + (r * x.blocks + block) * kBlock;
        int32_t dot = 0;
        float scale, offset = 0;
        for (int index = 0; index < kBlock; ++index) {
          if (q41)
            dot +=
                int32_t((tile[q41Byte(lane, index)] >> q41Shift(index)) & 0xf) *
                int32_t(int8_t(a[index]));
          else
            dot += int32_t(tile[q80Position(lane, index)]) *
                   int32_t(int8_t(a[index]));
        }
        const size_t index = size_t(r * x.blocks + block);
        scale = kernels::halfToFloat(readHalf(scales + 2 * lane));
        if (q41)
          offset =
              kernels::halfToFloat(readHalf(tile + kQ41Minimums + 2 * lane));
        else // the weights were stored + 128
          dot -= 128 * x.sums[index];
        accumulator =
            std::fma(float(dot), scale * x.scales[index], accumulator);
        if (q41)
          accumulator = std::fma(offset, x.scaledSums[index], accumulator);
      }
      y[r * outputStride + row] = accumulator;
    }
  }
}

void gemvScalar(const PackedQuantMatrix &weights, const QuantizedActivations &x,
                float *y, int64_t outputStride) {
  const int64_t chunk = 64;
#pragma omp parallel for schedule(static)
  for (int64_t first = 0; first < weights.rows; first += chunk)
    gemvScalarRows(weights, x, y, outputStride, first,
                   std::min(first + chunk, weights.rows));
}

#define SPANC_VNNI                                                             \
  __attribute__((                                                              \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

/// Rows [firstRow, firstRow + TileRows) of the activations against one
/// group of 16 weight rows.
template <QuantFormat Format, int TileRows>
SPANC_VNNI inline void
gemvGroup(const PackedQuantMatrix &weights, const QuantizedActivations &x,
          int64_t group, int64_t firstRow, float *y, int64_t outputStride) {
  constexpr bool q41 = Format == QuantFormat::Q4_1;
  constexpr int64_t valuesApart = valueStride(Format);
  constexpr int64_t scalesApart = scaleStride(Format);
  const int64_t blocks = weights.blocks;
  const uint8_t *tile =
      weights.bytes.data() + valuesOffset(Format, blocks, group, 0);
  const uint8_t *tileScales =
      weights.bytes.data() + scalesOffset(Format, blocks, group, 0);
  const uint8_t *activations = x.values.data() + firstRow * blocks * kBlock;
  const float *activationScales = x.scales.data() + firstRow * blocks;
  const float *activationSums = x.scaledSums.data() + firstRow * blocks;
  const int32_t *activationIntegerSums = x.sums.data() + firstRow * blocks;
  __m512 accumulators[TileRows];
  for (int r = 0; r < TileRows; ++r)
    accumulators[r] = _mm512_setzero_ps();
  const bool toL2 = prefetchWeightsToL2();
  for (int64_t block = 0; block < blocks;
       ++block, tile += valuesApart, tileScales += scalesApart) {
    prefetchAhead(tile, valuesApart, toL2);
    __m512i values[8];
    __m512 minimums;
    if constexpr (q41) {
      const __m512i mask = _mm512_set1_epi8(0x0f);
      for (int p = 0; p < 4; ++p) {
        __m512i bytes = _mm512_loadu_si512(tile + p * 64);
        values[2 * p] = _mm512_and_si512(bytes, mask);
        values[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
      }
      minimums = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i *>(tile + kQ41Minimums)));
    } else {
      for (int k = 0; k < 8; ++k)
        values[k] = _mm512_loadu_si512(tile + k * 64);
      (void)minimums;
    }
    const __m512 scales = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(tileScales)));
    for (int r = 0; r < TileRows; ++r) {
      const uint8_t *a = activations + (r * blocks + block) * kBlock;
      int32_t words[8];
      std::memcpy(words, a, sizeof(words));
      // Two independent chains; integer sums are exact in any order.
      __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        even =
            _mm512_dpbusd_epi32(even, values[k], _mm512_set1_epi32(words[k]));
        odd = _mm512_dpbusd_epi32(odd, values[k + 1],
                                  _mm512_set1_epi32(words[k + 1]));
      }
      __m512i dot = _mm512_add_epi32(even, odd);
      const int64_t index = r * blocks + block;
      if constexpr (!q41) // the weights were stored + 128
        dot = _mm512_sub_epi32(
            dot, _mm512_set1_epi32(128 * activationIntegerSums[index]));
      accumulators[r] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(dot),
          _mm512_mul_ps(scales, _mm512_set1_ps(activationScales[index])),
          accumulators[r]);
      if constexpr (q41)
        accumulators[r] = _mm512_fmadd_ps(
            minimums, _mm512_set1_ps(activationSums[index]), accumulators[r]);
    }
  }
  const int64_t firstColumn = group * kGroupRows;
  const int64_t valid =
      std::min<int64_t>(kGroupRows, weights.rows - firstColumn);
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  for (int r = 0; r < TileRows; ++r)
    _mm512_mask_storeu_ps(y + (firstRow + r) * outputStride + firstColumn, mask,
                          accumulators[r]);
}

template <QuantFormat Format>
SPANC_VNNI void gemvVnniGroup(const PackedQuantMatrix &weights,
                              const QuantizedActivations &x, float *y,
                              int64_t outputStride, int64_t group) {
  const int64_t rows = x.rows;
  {
    int64_t row = 0;
    for (; row + kMaxTileRows <= rows; row += kMaxTileRows)
      gemvGroup<Format, kMaxTileRows>(weights, x, group, row, y, outputStride);
    switch (rows - row) {
    case 3:
      gemvGroup<Format, 3>(weights, x, group, row, y, outputStride);
      break;
    case 2:
      gemvGroup<Format, 2>(weights, x, group, row, y, outputStride);
      break;
    case 1:
      gemvGroup<Format, 1>(weights, x, group, row, y, outputStride);
      break;
    default:
      break;
    }
  }
}

template <QuantFormat Format>
void gemvVnni(const PackedQuantMatrix &weights, const QuantizedActivations &x,
              float *y, int64_t outputStride) {
#pragma omp parallel for schedule(static)
  for (int64_t group = 0; group < weights.groups; ++group)
    gemvVnniGroup<Format>(weights, x, y, outputStride, group);
}

} // namespace

bool hasQuantGemvKernel() { return hasVnniKernel() || hasAvx2Kernel(); }

bool hasQuantGemmKernel(QuantFormat format) {
  return hasVnniKernel() || (hasAvx2Kernel() && format == QuantFormat::Q4_1);
}

PackedQuantMatrix packQuantMatrices(const QuantMatrix *parts, size_t count) {
  PackedQuantMatrix packed;
  packed.format = parts[0].format;
  packed.columns = parts[0].columns;
  for (size_t part = 0; part < count; ++part)
    packed.rows += parts[part].rows;
  packed.blocks = packed.columns / kBlock;
  packed.groups = (packed.rows + kGroupRows - 1) / kGroupRows;
  const int64_t tileBytes = PackedQuantMatrix::tileBytes(packed.format);
  packed.bytes.resize(size_t(packed.groups * packed.blocks * tileBytes));
  std::fill(packed.bytes.begin(), packed.bytes.end(), 0);
  // Source row of each stacked row.
  std::vector<const uint8_t *> sources(size_t(packed.rows));
  int64_t row = 0;
  for (size_t part = 0; part < count; ++part)
    for (int64_t index = 0; index < parts[part].rows; ++index)
      sources[size_t(row++)] = parts[part].data + index * parts[part].rowBytes;
  const int64_t blockBytes = quantBlockBytes(packed.format);
  const bool q41 = packed.format == QuantFormat::Q4_1;
  bool lowestQ80Value = false;
#pragma omp parallel for schedule(static) reduction(|| : lowestQ80Value)
  for (int64_t stacked = 0; stacked < packed.rows; ++stacked) {
    const int64_t group = stacked / kGroupRows;
    const int lane = int(stacked % kGroupRows);
    for (int64_t block = 0; block < packed.blocks; ++block) {
      const uint8_t *in = sources[size_t(stacked)] + block * blockBytes;
      uint8_t *tile = packed.bytes.data() +
                      valuesOffset(packed.format, packed.blocks, group, block);
      uint8_t *scales =
          packed.bytes.data() +
          scalesOffset(packed.format, packed.blocks, group, block);
      if (q41) {
        for (int index = 0; index < kBlock; ++index) {
          uint8_t value =
              index < 16 ? in[4 + index] & 0xf : in[4 + index - 16] >> 4;
          tile[q41Byte(lane, index)] |= uint8_t(value << q41Shift(index));
        }
        std::memcpy(tile + kQ41Minimums + 2 * lane, in + 2, 2);
      } else {
        for (int index = 0; index < kBlock; ++index) {
          const int8_t value = int8_t(in[2 + index]);
          lowestQ80Value = lowestQ80Value || value == -128;
          tile[q80Position(lane, index)] = uint8_t(int(value) + 128);
        }
      }
      std::memcpy(scales + 2 * lane, in, 2);
    }
  }
  packed.hasLowestQ80Value = lowestQ80Value;
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

namespace {

/// One block as ggml's x86 quantizers do it (the reference path).
void quantizeBlockScalar(const float *source, uint8_t *values, bool roundSum,
                         float &scale, float &scaledSum, int32_t &blockSum) {
  float maximum = 0;
  for (int i = 0; i < kBlock; ++i)
    maximum = std::max(maximum, std::abs(source[i]));
  const float d = maximum / 127.0f;
  // As ggml's x86 Q8 quantizers: multiply by 127 / max, round to even.
  const float inverse = maximum > 0 ? 127.0f / maximum : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    // Finite inputs give [-127, 127]; a NaN or infinity (a broken model's
    // activations) saturates as the AVX-512 path's conversion does, so the
    // block sums stay small and no float-to-int conversion overflows.
    float rounded = std::nearbyint(source[i] * inverse);
    int value = rounded >= 127.0f    ? 127
                : rounded >= -128.0f ? int(rounded)
                                     : -128;
    values[i] = uint8_t(int8_t(value));
    sum += value;
  }
  blockSum = sum;
  // ggml keeps d = max/127 in f16; Q8_1 also keeps s = d * sum in f16,
  // and Q8_0 blocks (dotted signed x signed) need none.
  scale = roundToHalf(d);
  scaledSum = roundSum ? roundToHalf(d * float(sum)) : scale * float(sum);
}

#define SPANC_AVX512_F16C                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

SPANC_AVX512_F16C inline float roundToHalfF16c(float value) {
  return _mm_cvtss_f32(
      _mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT)));
}

/// The same operations on two 16-lane vectors (same bits: the products
/// and the round-to-even are the same instructions' semantics).
SPANC_AVX512_F16C void quantizeBlockAvx512(const float *source, uint8_t *values,
                                           bool roundSum, float &scale,
                                           float &scaledSum,
                                           int32_t &blockSum) {
  const __m512 low = _mm512_loadu_ps(source);
  const __m512 high = _mm512_loadu_ps(source + 16);
  const float maximum = _mm512_reduce_max_ps(
      _mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
  const float d = maximum / 127.0f;
  const __m512 inverse = _mm512_set1_ps(maximum > 0 ? 127.0f / maximum : 0.0f);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  // Finite inputs give [-127, 127]; NaN and infinities convert to INT_MIN
  // and are clamped with the rest, so the sum matches the stored bytes and
  // stays small (quantGemv multiplies it by 128).
  const __m512i lowest = _mm512_set1_epi32(-128),
                highest = _mm512_set1_epi32(127);
  const __m512i lowValues = _mm512_min_epi32(
      highest,
      _mm512_max_epi32(lowest, _mm512_cvtps_epi32(_mm512_roundscale_ps(
                                   _mm512_mul_ps(low, inverse), kRound))));
  const __m512i highValues = _mm512_min_epi32(
      highest,
      _mm512_max_epi32(lowest, _mm512_cvtps_epi32(_mm512_roundscale_ps(
                                   _mm512_mul_ps(high, inverse), kRound))));
  const int32_t sum =
      _mm512_reduce_add_epi32(_mm512_add_epi32(lowValues, highValues));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(values),
                   _mm512_cvtepi32_epi8(lowValues));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(values + 16),
                   _mm512_cvtepi32_epi8(highValues));
  blockSum = sum;
  scale = roundToHalfF16c(d);
  scaledSum = roundSum ? roundToHalfF16c(d * float(sum)) : scale * float(sum);
}

} // namespace

void prepareActivations(int64_t m, int64_t k, QuantFormat format,
                        QuantizedActivations &out) {
  const int64_t blocks = k / kBlock;
  out.format = format;
  out.rows = m;
  out.columns = k;
  out.blocks = blocks;
  // resize, not assign: every element is written by the quantizer.
  out.values.resize(size_t(m * blocks * kBlock));
  out.scales.resize(size_t(m * blocks));
  out.scaledSums.resize(size_t(m * blocks));
  out.sums.resize(size_t(m * blocks));
}

namespace {

/// Blocks [firstBlock, endBlock) of rows [firstRow, endRow).
void quantizeActivationRows(const float *x, int64_t stride, int64_t firstRow,
                            int64_t endRow, int64_t firstBlock,
                            int64_t endBlock, QuantizedActivations &out,
                            bool forceScalar) {
  const bool roundSum = out.format == QuantFormat::Q4_1;
  const bool avx512 = !forceScalar && cpuFeatures().hasAvx512();
  const bool avx2 = !forceScalar && !avx512 && hasAvx2Kernel();
  const int64_t blocks = out.blocks;
  for (int64_t row = firstRow; row < endRow; ++row)
    for (int64_t block = firstBlock; block < endBlock; ++block) {
      const float *source = x + row * stride + block * kBlock;
      uint8_t *values = out.values.data() + (row * blocks + block) * kBlock;
      const size_t index = size_t(row * blocks + block);
      if (avx512)
        quantizeBlockAvx512(source, values, roundSum, out.scales[index],
                            out.scaledSums[index], out.sums[index]);
      else if (avx2)
        quantizeBlockAvx2(source, values, roundSum, out.scales[index],
                          out.scaledSums[index], out.sums[index]);
      else
        quantizeBlockScalar(source, values, roundSum, out.scales[index],
                            out.scaledSums[index], out.sums[index]);
    }
}

} // namespace

void quantizeActivationBlocks(const float *x, int64_t stride,
                              int64_t firstBlock, int64_t endBlock,
                              QuantizedActivations &out, bool forceScalar) {
  quantizeActivationRows(x, stride, 0, out.rows, firstBlock, endBlock, out,
                         forceScalar);
}

void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantFormat format, QuantizedActivations &out,
                         bool forceScalar) {
  prepareActivations(m, k, format, out);
  // A prompt's rows are split between the threads (a block's bits do not
  // depend on who quantizes it); a few decode rows are not worth a fork.
  constexpr int64_t kRowsPerThread = 16;
  if (m < 2 * kRowsPerThread || omp_in_parallel()) {
    quantizeActivationRows(x, stride, 0, m, 0, out.blocks, out, forceScalar);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(),
                  thread = omp_get_thread_num();
    quantizeActivationRows(x, stride, m * thread / threads,
                           m * (thread + 1) / threads, 0, out.blocks, out,
                           forceScalar);
  }
}

void quantGemvGroups(const PackedQuantMatrix &weights,
                     const QuantizedActivations &x, float *y,
                     int64_t outputStride, int64_t firstGroup,
                     int64_t endGroup) {
  switch (gemvPath(weights)) {
  case GemvPath::Portable:
    gemvScalarRows(weights, x, y, outputStride, firstGroup * kGroupRows,
                   std::min(endGroup * kGroupRows, weights.rows));
    return;
  case GemvPath::Avx2:
    gemvGroupsAvx2(weights, x, y, outputStride, firstGroup, endGroup);
    return;
  case GemvPath::Vnni:
    for (int64_t group = firstGroup; group < endGroup; ++group)
      if (weights.format == QuantFormat::Q4_1)
        gemvVnniGroup<QuantFormat::Q4_1>(weights, x, y, outputStride, group);
      else
        gemvVnniGroup<QuantFormat::Q8_0>(weights, x, y, outputStride, group);
    return;
  }
}

void quantGemv(const PackedQuantMatrix &weights, const QuantizedActivations &x,
               float *y, int64_t outputStride, bool forceScalar) {
  const GemvPath path = forceScalar ? GemvPath::Portable : gemvPath(weights);
  switch (path) {
  case GemvPath::Portable:
    gemvScalar(weights, x, y, outputStride);
    return;
  case GemvPath::Avx2:
#pragma omp parallel for schedule(static)
    for (int64_t group = 0; group < weights.groups; ++group)
      gemvGroupsAvx2(weights, x, y, outputStride, group, group + 1);
    return;
  case GemvPath::Vnni:
    if (weights.format == QuantFormat::Q4_1)
      gemvVnni<QuantFormat::Q4_1>(weights, x, y, outputStride);
    else
      gemvVnni<QuantFormat::Q8_0>(weights, x, y, outputStride);
    return;
  }
}

} // namespace spanc::cpu
