//===- QuantGemmAvx2.cpp - Prompt-size 4-bit products on AVX2 -------------===//
//
// Many activation rows against Q4_1 tiles (QuantGemv.h's layout), on CPUs
// with AVX2 but no AVX-512: the prompt rows' int8 products where the
// alternative is f32 FMAs (docs/ARCHITECTURE.md, "CPU GEMMs"). The GEMV
// (QuantGemvAvx2.cpp) pays per weight: it unpacks a tile's nibbles for
// every one or two rows. Here a group's tiles are unpacked once into u8
// vectors in vpmaddubsw's order, and rows go through them four at a time,
// the four rows' 16 lanes of saturating s16 sums in registers: per 4 rows,
// 16 columns and 4 values, 2 broadcasts a row and 16 vpmaddubsw + adds,
// against 64 f32 FMAs.
//
// Each output is the GEMV's chain, block by block in order, with the same
// operations (the integer dots are exact, and no s16 lane saturates: a
// lane sums a block's 16 products of 0..15 by -128..127, at most 30 720):
// every output has the GEMV's bits, and so the VNNI and portable paths'.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/QuantGemvInternal.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace spanc::cpu::quantgemv {

namespace {

using namespace quantlayout;

/// u8 vectors of one unpacked block: for each of its 4 dword pairs, lanes
/// 0-7's values 8p..8p+3 and 8p+4..8p+7, then lanes 8-15's.
constexpr int kBlockVectors = 16;

/// A group's Q4_1 nibbles as u8 vectors, `kBlockVectors` a block.
SPANC_AVX2 void unpackGroup(const uint8_t *tile, int64_t blocks, __m256i *out) {
  const __m256i nibbles = _mm256_set1_epi8(0x0f);
  for (int64_t block = 0; block < blocks;
       ++block, tile += PackedQuantMatrix::tileBytes(QuantFormat::Q4_1))
    for (int p = 0; p < 4; ++p)
      for (int half = 0; half < 2; ++half) {
        const __m256i bytes = _mm256_loadu_si256(
            reinterpret_cast<const __m256i *>(tile + 64 * p + 32 * half));
        __m256i *to = out + block * kBlockVectors + 4 * p + 2 * half;
        _mm256_store_si256(to, _mm256_and_si256(bytes, nibbles));
        _mm256_store_si256(
            to + 1, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibbles));
      }
}

/// One row's step: its block's p-th pair of 4-value words (the 8 bytes at
/// `pair`) against the four unpacked vectors of the step, into its low and
/// high lane sums.
SPANC_AVX2 inline void rowStep(const uint8_t *pair, __m256i lowEarly,
                               __m256i lowLate, __m256i highEarly,
                               __m256i highLate, __m256i &pairsLow,
                               __m256i &pairsHigh) {
  int32_t words[2];
  std::memcpy(words, pair, sizeof(words)); // one vpbroadcastd load each
  const __m256i early = _mm256_set1_epi32(words[0]),
                late = _mm256_set1_epi32(words[1]);
  pairsLow = _mm256_add_epi16(
      pairsLow, _mm256_add_epi16(_mm256_maddubs_epi16(lowEarly, early),
                                 _mm256_maddubs_epi16(lowLate, late)));
  pairsHigh = _mm256_add_epi16(
      pairsHigh, _mm256_add_epi16(_mm256_maddubs_epi16(highEarly, early),
                                  _mm256_maddubs_epi16(highLate, late)));
  sequencePoint(pairsLow);
  sequencePoint(pairsHigh);
}

/// acc = fma(dot, dw * da, acc); acc = fma(mw, sa, acc) for one row's 16
/// lanes at `accumulator` (QuantGemv.h's fold).
SPANC_AVX2 inline void foldRow(float *accumulator, __m256i pairsLow,
                               __m256i pairsHigh, __m256 lowScales,
                               __m256 highScales, __m256 lowMinimums,
                               __m256 highMinimums, float activationScale,
                               float activationSum) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 scale = _mm256_set1_ps(activationScale),
               sum = _mm256_set1_ps(activationSum);
  __m256 low = _mm256_load_ps(accumulator),
         high = _mm256_load_ps(accumulator + 8);
  low = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairsLow, ones)),
                        _mm256_mul_ps(lowScales, scale), low);
  high = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairsHigh, ones)),
                         _mm256_mul_ps(highScales, scale), high);
  _mm256_store_ps(accumulator, _mm256_fmadd_ps(lowMinimums, sum, low));
  _mm256_store_ps(accumulator + 8, _mm256_fmadd_ps(highMinimums, sum, high));
}

/// Rows [firstRow, firstRow + 4) against one unpacked group; their 16
/// outputs each into `accumulators` (4 x 16 floats, zeroed by the caller).
SPANC_AVX2 void fourRows(const __m256i *unpacked, const uint8_t *tile,
                         const QuantizedActivations &x, int64_t firstRow,
                         float *accumulators) {
  const int64_t blocks = x.blocks;
  const int64_t rowBytes = blocks * kBlock;
  const uint8_t *values = x.values.data() + firstRow * rowBytes;
  const float *scales = x.scales.data() + firstRow * blocks;
  const float *sums = x.scaledSums.data() + firstRow * blocks;
  for (int64_t block = 0; block < blocks; ++block, unpacked += kBlockVectors,
               tile += PackedQuantMatrix::tileBytes(QuantFormat::Q4_1)) {
    __m256i low0 = _mm256_setzero_si256(), high0 = low0, low1 = low0,
            high1 = low0, low2 = low0, high2 = low0, low3 = low0, high3 = low0;
    const uint8_t *blockValues = values + block * kBlock;
    for (int p = 0; p < 4; ++p) {
      const __m256i *step = unpacked + 4 * p;
      const __m256i lowEarly = _mm256_load_si256(step),
                    lowLate = _mm256_load_si256(step + 1),
                    highEarly = _mm256_load_si256(step + 2),
                    highLate = _mm256_load_si256(step + 3);
      const uint8_t *pair = blockValues + 8 * p;
      rowStep(pair, lowEarly, lowLate, highEarly, highLate, low0, high0);
      rowStep(pair + rowBytes, lowEarly, lowLate, highEarly, highLate, low1,
              high1);
      rowStep(pair + 2 * rowBytes, lowEarly, lowLate, highEarly, highLate, low2,
              high2);
      rowStep(pair + 3 * rowBytes, lowEarly, lowLate, highEarly, highLate, low3,
              high3);
    }
    const __m256 lowScales = loadHalves(tile + kQ41Scales),
                 highScales = loadHalves(tile + kQ41Scales + 16),
                 lowMinimums = loadHalves(tile + kQ41Minimums),
                 highMinimums = loadHalves(tile + kQ41Minimums + 16);
    foldRow(accumulators, low0, high0, lowScales, highScales, lowMinimums,
            highMinimums, scales[block], sums[block]);
    foldRow(accumulators + 16, low1, high1, lowScales, highScales, lowMinimums,
            highMinimums, scales[blocks + block], sums[blocks + block]);
    foldRow(accumulators + 32, low2, high2, lowScales, highScales, lowMinimums,
            highMinimums, scales[2 * blocks + block], sums[2 * blocks + block]);
    foldRow(accumulators + 48, low3, high3, lowScales, highScales, lowMinimums,
            highMinimums, scales[3 * blocks + block], sums[3 * blocks + block]);
  }
}

} // namespace

SPANC_AVX2 void gemmGroupAvx2(const PackedQuantMatrix &weights,
                              const QuantizedActivations &x, float *y,
                              int64_t outputStride, int64_t group,
                              int64_t endRow) {
  const int64_t blocks = weights.blocks;
  // One buffer a thread, grown to the widest matrix it meets (SmolLM2's
  // down projection: 48 blocks, 24 KiB, which stays in L1 with the rows).
  thread_local std::vector<uint8_t, AlignedAllocator<uint8_t>> buffer;
  const size_t bytes = size_t(blocks * kBlockVectors) * sizeof(__m256i);
  if (buffer.size() < bytes)
    buffer.resize(bytes);
  __m256i *unpacked = reinterpret_cast<__m256i *>(buffer.data());
  const uint8_t *tile =
      weights.bytes.data() + valuesOffset(QuantFormat::Q4_1, blocks, group, 0);
  unpackGroup(tile, blocks, unpacked);

  const GroupLaneMasks masks = groupLaneMasks(weights, group);
  alignas(32) float accumulators[4 * kGroupRows];
  for (int64_t row = 0; row + 4 <= endRow; row += 4) {
    std::fill(std::begin(accumulators), std::end(accumulators), 0.0f);
    fourRows(unpacked, tile, x, row, accumulators);
    for (int r = 0; r < 4; ++r)
      storeGroupRow(y + (row + r) * outputStride + group * kGroupRows, masks,
                    _mm256_load_ps(accumulators + 16 * r),
                    _mm256_load_ps(accumulators + 16 * r + 8));
  }
}

} // namespace spanc::cpu::quantgemv
