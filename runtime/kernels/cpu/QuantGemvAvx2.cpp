//===- QuantGemvAvx2.cpp - Decode-size 4/8-bit products on AVX2 -----------===//
//
// CPUs with AVX2, FMA and F16C but no AVX-512 VNNI. Without VNNI's
// u8 x s8 -> s32 dot, vpmaddubsw multiplies u8 by s8 and adds neighbours
// into saturating s16 lanes, and vpmaddwd by ones adds those pairs into
// s32. The integer dots stay exact, and so every output keeps the bits of
// the VNNI and portable paths (QuantGemv.h), because no s16 lane saturates:
//   Q4_1: weights 0..15 times activations -128..127, so a pair is at most
//         3 840 in magnitude; the eight vectors of a block (16 products a
//         lane) add up to at most 30 720 before one vpmaddwd.
//   Q8_0: the stored w + 128 would overflow (255 x 128 x 2); instead |a|
//         (u8, at most 128) times w * sign(a) (vpsignb), a pair at most
//         32 512, exact unless w = -128 (its negation wraps). Quantizers
//         write -127..127; a matrix holding a -128 takes the portable path
//         (avx2Handles).
// A 256-bit vector holds 8 of a tile's 16 row lanes, so each tile is two
// halves; each output is still one chain over its blocks in order.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/QuantGemvInternal.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace spanc::cpu::quantgemv {

namespace {

using namespace quantlayout;

/// From how many activation rows a Q4_1 group takes the four-row kernel
/// (its unpacking of the group then costs less than the GEMV's per pair).
constexpr int64_t kGemmMinRows = 4;

/// The integer dots of one block (the tile at `values`) for its 16 row
/// lanes, low (0-7) and high (8-15), with one or two activation rows
/// (`first`, `second`: each row's block as 8 dwords; `second` null for
/// one row). Each broadcast serves both halves at once and then dies, and
/// everything is named, not indexed (arrays of vectors GCC 12 keeps on the
/// stack), so that the loop stays in the 16 registers.
template <QuantFormat Format>
SPANC_AVX2 inline void tileDots(const uint8_t *values, const int32_t *first,
                                const int32_t *second, __m256i &lowFirst,
                                __m256i &highFirst, __m256i &lowSecond,
                                __m256i &highSecond) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Format == QuantFormat::Q4_1) {
    // Each s16 lane sums the block's 16 products of its row lane.
    const __m256i nibbles = _mm256_set1_epi8(0x0f);
    __m256i pairsLowFirst = _mm256_setzero_si256(),
            pairsHighFirst = pairsLowFirst, pairsLowSecond = pairsLowFirst,
            pairsHighSecond = pairsLowFirst;
    for (int p = 0; p < 4; ++p) {
      const __m256i lowBytes = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i *>(values + 64 * p)),
                    highBytes =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                            values + 64 * p + 32));
      // Values 8p..8p+3 (low nibbles) and 8p+4..8p+7 (high nibbles).
      const __m256i lowEarly = _mm256_and_si256(lowBytes, nibbles),
                    lowLate = _mm256_and_si256(_mm256_srli_epi16(lowBytes, 4),
                                               nibbles),
                    highEarly = _mm256_and_si256(highBytes, nibbles),
                    highLate = _mm256_and_si256(_mm256_srli_epi16(highBytes, 4),
                                                nibbles);
      __m256i early = _mm256_set1_epi32(first[2 * p]),
              late = _mm256_set1_epi32(first[2 * p + 1]);
      pairsLowFirst = _mm256_add_epi16(
          pairsLowFirst, _mm256_add_epi16(_mm256_maddubs_epi16(lowEarly, early),
                                          _mm256_maddubs_epi16(lowLate, late)));
      pairsHighFirst = _mm256_add_epi16(
          pairsHighFirst,
          _mm256_add_epi16(_mm256_maddubs_epi16(highEarly, early),
                           _mm256_maddubs_epi16(highLate, late)));
      if (second) {
        early = _mm256_set1_epi32(second[2 * p]);
        late = _mm256_set1_epi32(second[2 * p + 1]);
        pairsLowSecond = _mm256_add_epi16(
            pairsLowSecond,
            _mm256_add_epi16(_mm256_maddubs_epi16(lowEarly, early),
                             _mm256_maddubs_epi16(lowLate, late)));
        pairsHighSecond = _mm256_add_epi16(
            pairsHighSecond,
            _mm256_add_epi16(_mm256_maddubs_epi16(highEarly, early),
                             _mm256_maddubs_epi16(highLate, late)));
        sequencePoint(pairsLowSecond);
        sequencePoint(pairsHighSecond);
      }
      sequencePoint(pairsLowFirst);
      sequencePoint(pairsHighFirst);
    }
    lowFirst = _mm256_madd_epi16(pairsLowFirst, ones);
    highFirst = _mm256_madd_epi16(pairsHighFirst, ones);
    if (second) {
      lowSecond = _mm256_madd_epi16(pairsLowSecond, ones);
      highSecond = _mm256_madd_epi16(pairsHighSecond, ones);
    }
  } else {
    const __m256i offset = _mm256_set1_epi8(char(0x80));
    lowFirst = highFirst = lowSecond = highSecond = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      // Stored w + 128: back to the signed weight; |a| times w * sign(a).
      const __m256i low = _mm256_xor_si256(
                        _mm256_loadu_si256(
                            reinterpret_cast<const __m256i *>(values + 64 * k)),
                        offset),
                    high = _mm256_xor_si256(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                            values + 64 * k + 32)),
                        offset);
      __m256i a = _mm256_set1_epi32(first[k]), magnitude = _mm256_abs_epi8(a);
      lowFirst = _mm256_add_epi32(
          lowFirst,
          _mm256_madd_epi16(
              _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(low, a)), ones));
      highFirst = _mm256_add_epi32(
          highFirst,
          _mm256_madd_epi16(
              _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(high, a)),
              ones));
      if (second) {
        a = _mm256_set1_epi32(second[k]);
        magnitude = _mm256_abs_epi8(a);
        lowSecond = _mm256_add_epi32(
            lowSecond,
            _mm256_madd_epi16(
                _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(low, a)),
                ones));
        highSecond = _mm256_add_epi32(
            highSecond,
            _mm256_madd_epi16(
                _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(high, a)),
                ones));
        sequencePoint(lowSecond);
        sequencePoint(highSecond);
      }
      sequencePoint(lowFirst);
      sequencePoint(highFirst);
    }
  }
}

/// acc = fma(dot, dw * da, acc), then for Q4_1 acc = fma(mw, sa, acc): the
/// VNNI kernel's fold (QuantGemv.h).
template <QuantFormat Format>
SPANC_AVX2 inline __m256 fold(__m256 accumulator, __m256i dot, __m256 scales,
                              __m256 minimums, float activationScale,
                              float activationSum) {
  accumulator = _mm256_fmadd_ps(
      _mm256_cvtepi32_ps(dot),
      _mm256_mul_ps(scales, _mm256_set1_ps(activationScale)), accumulator);
  if constexpr (Format == QuantFormat::Q4_1)
    accumulator =
        _mm256_fmadd_ps(minimums, _mm256_set1_ps(activationSum), accumulator);
  return accumulator;
}

/// Activation row `firstRow` (and the next, with TwoRows) against one
/// group of 16 weight rows.
template <QuantFormat Format, bool TwoRows>
SPANC_AVX2 void gemvGroup(const PackedQuantMatrix &weights,
                          const QuantizedActivations &x, int64_t group,
                          int64_t firstRow, float *y, int64_t outputStride) {
  constexpr bool q41 = Format == QuantFormat::Q4_1;
  constexpr int64_t valuesApart = valueStride(Format);
  constexpr int64_t scalesApart = scaleStride(Format);
  const int64_t blocks = weights.blocks;
  const uint8_t *tile =
      weights.bytes.data() + valuesOffset(Format, blocks, group, 0);
  const uint8_t *tileScales =
      weights.bytes.data() + scalesOffset(Format, blocks, group, 0);
  const uint8_t *firstValues = x.values.data() + firstRow * blocks * kBlock;
  const uint8_t *secondValues = firstValues + blocks * kBlock;
  const float *scales = x.scales.data() + firstRow * blocks;
  const float *sums = x.scaledSums.data() + firstRow * blocks;
  // Row lanes 0-7 (low) and 8-15 (high) of the group, per activation row.
  __m256 lowFirst = _mm256_setzero_ps(), highFirst = lowFirst,
         lowSecond = lowFirst, highSecond = lowFirst;
  const bool toL2 = prefetchWeightsToL2();
  for (int64_t block = 0; block < blocks;
       ++block, tile += valuesApart, tileScales += scalesApart) {
    prefetchAhead(tile, valuesApart, toL2);
    int32_t first[8], second[8];
    std::memcpy(first, firstValues + block * kBlock, sizeof(first));
    if constexpr (TwoRows)
      std::memcpy(second, secondValues + block * kBlock, sizeof(second));
    const int32_t *secondWords = TwoRows ? second : nullptr;
    const __m256 lowMinimums = q41 ? loadHalves(tile + kQ41Minimums)
                                   : _mm256_setzero_ps(),
                 highMinimums = q41 ? loadHalves(tile + kQ41Minimums + 16)
                                    : _mm256_setzero_ps();
    const __m256 lowScales = loadHalves(tileScales),
                 highScales = loadHalves(tileScales + 16);
    __m256i dotLowFirst, dotHighFirst, dotLowSecond, dotHighSecond;
    tileDots<Format>(tile, first, secondWords, dotLowFirst, dotHighFirst,
                     dotLowSecond, dotHighSecond);
    lowFirst = fold<Format>(lowFirst, dotLowFirst, lowScales, lowMinimums,
                            scales[block], sums[block]);
    highFirst = fold<Format>(highFirst, dotHighFirst, highScales, highMinimums,
                             scales[block], sums[block]);
    if constexpr (TwoRows) {
      lowSecond = fold<Format>(lowSecond, dotLowSecond, lowScales, lowMinimums,
                               scales[blocks + block], sums[blocks + block]);
      highSecond =
          fold<Format>(highSecond, dotHighSecond, highScales, highMinimums,
                       scales[blocks + block], sums[blocks + block]);
    }
  }
  const GroupLaneMasks masks = groupLaneMasks(weights, group);
  float *out = y + firstRow * outputStride + group * kGroupRows;
  storeGroupRow(out, masks, lowFirst, highFirst);
  if constexpr (TwoRows)
    storeGroupRow(out + outputStride, masks, lowSecond, highSecond);
}

template <QuantFormat Format>
SPANC_AVX2 void gemvGroupAllRows(const PackedQuantMatrix &weights,
                                 const QuantizedActivations &x, float *y,
                                 int64_t outputStride, int64_t group) {
  // Q4_1 rows in fours on the group's unpacked tiles (QuantGemmAvx2.cpp),
  // the rest two at a time: each weight load and nibble mask serves both
  // rows (their four f32 accumulators go to the stack and back once a
  // block; the integer work stays in registers).
  int64_t row = 0;
  if (Format == QuantFormat::Q4_1 && x.rows >= kGemmMinRows) {
    row = x.rows - x.rows % 4;
    gemmGroupAvx2(weights, x, y, outputStride, group, row);
  }
  for (; row + 2 <= x.rows; row += 2)
    gemvGroup<Format, true>(weights, x, group, row, y, outputStride);
  if (row < x.rows)
    gemvGroup<Format, false>(weights, x, group, row, y, outputStride);
}

/// The sum of 8 integer lanes (exact in any order).
SPANC_AVX2 inline int32_t sumLanes(__m256i values) {
  __m128i fours = _mm_add_epi32(_mm256_castsi256_si128(values),
                                _mm256_extracti128_si256(values, 1));
  fours = _mm_add_epi32(fours, _mm_shuffle_epi32(fours, 0x4e));
  fours = _mm_add_epi32(fours, _mm_shuffle_epi32(fours, 0xb1));
  return _mm_cvtsi128_si32(fours);
}

SPANC_AVX2 inline float roundToHalfF16c(float value) {
  return _mm_cvtss_f32(
      _mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT)));
}

} // namespace

void gemvGroupsAvx2(const PackedQuantMatrix &weights,
                    const QuantizedActivations &x, float *y,
                    int64_t outputStride, int64_t firstGroup,
                    int64_t endGroup) {
  for (int64_t group = firstGroup; group < endGroup; ++group)
    if (weights.format == QuantFormat::Q4_1)
      gemvGroupAllRows<QuantFormat::Q4_1>(weights, x, y, outputStride, group);
    else
      gemvGroupAllRows<QuantFormat::Q8_0>(weights, x, y, outputStride, group);
}

SPANC_AVX2 void quantizeBlockAvx2(const float *source, uint8_t *values,
                                  bool roundSum, float &scale, float &scaledSum,
                                  int32_t &blockSum) {
  __m256 parts[4];
  for (int i = 0; i < 4; ++i)
    parts[i] = _mm256_loadu_ps(source + 8 * i);
  // As the reference's std::max(maximum, |x|): vmaxps returns its second
  // operand when either is NaN, so a NaN element leaves the maximum alone.
  const __m256 absolute = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 largest = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i)
    largest = _mm256_max_ps(_mm256_and_ps(parts[i], absolute), largest);
  __m128 fours = _mm_max_ps(_mm256_castps256_ps128(largest),
                            _mm256_extractf128_ps(largest, 1));
  fours = _mm_max_ps(fours, _mm_movehl_ps(fours, fours));
  fours = _mm_max_ss(fours, _mm_shuffle_ps(fours, fours, 1));
  const float maximum = _mm_cvtss_f32(fours);
  const float d = maximum / 127.0f;
  const __m256 inverse = _mm256_set1_ps(maximum > 0 ? 127.0f / maximum : 0.0f);
  // NaN (and anything past int32) converts to INT_MIN and is clamped with
  // the rest to -128, as the reference saturates it.
  const __m256i lowest = _mm256_set1_epi32(-128),
                highest = _mm256_set1_epi32(127);
  __m256i integers[4];
  for (int i = 0; i < 4; ++i)
    integers[i] = _mm256_min_epi32(
        highest, _mm256_max_epi32(lowest, _mm256_cvtps_epi32(_mm256_round_ps(
                                              _mm256_mul_ps(parts[i], inverse),
                                              _MM_FROUND_TO_NEAREST_INT |
                                                  _MM_FROUND_NO_EXC))));
  blockSum =
      sumLanes(_mm256_add_epi32(_mm256_add_epi32(integers[0], integers[1]),
                                _mm256_add_epi32(integers[2], integers[3])));
  // The packs interleave 128-bit lanes: 0-3 of each part, then 4-7; the
  // permutation puts the 32 bytes back in order.
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(integers[0], integers[1]),
                         _mm256_packs_epi32(integers[2], integers[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(values),
                      _mm256_permutevar8x32_epi32(
                          bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  scale = roundToHalfF16c(d);
  scaledSum =
      roundSum ? roundToHalfF16c(d * float(blockSum)) : scale * float(blockSum);
}

} // namespace spanc::cpu::quantgemv
