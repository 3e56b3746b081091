//===- AttentionAmx.cpp - The AMX attention tile step ---------------------===//
//
// The AMX path (f16 K/V, CPUs with AMX). Pages are folded two at a time
// (a pair: pages pageBegin + 2i and + 2i + 1 of the item, so a page's half
// never depends on which rows a tile holds), for a tile of 16 query rows
// (rows past the tile are zero queries, never visible):
//   S_h[row][slot] = Q[row] . K_h[slot] for each half h: Q as A tiles (16
//     rows x 32 dims), K as B tiles of dimension pairs (AMX's VNNI order),
//     each split into a bf16 high and low part, Qh.Kh + Qh.Kl + Ql.Kh with
//     f32 sums (three tile products per 32 dims: scores to ~16 bits, where
//     bf16 alone would move the softmax weights by percents);
//   the online softmax per row over the pair's 32 slots, as foldBlockByRow
//     does it per block;
//   PV[row][dim] = P[row] . V[:, dim]: P and V split into high and low
//     bf16 parts too (V exactly: f16 has 11 bits), per half [Ph | Ph] and
//     [Pl | 0] as A tiles against [Vh ; Vl] B tiles of slot pairs (16 dims
//     each), f32 sums; the weights' row sums the same way against a tile
//     of ones, so that the sum that normalizes is that of the weights P.V
//     used;
//   acc = acc * correction + PV, per row.
// Every output element is its own sum in a fixed order, and an empty or
// invisible half contributes zero weights at the same place, so a row's
// bits do not depend on the other rows of its tile; every tile of a
// sequence of several queries takes this path when the call allows it.
// K and V blocks are packed (bf16 pairs, high and low parts) once per
// thread and page through the block cache, or per block in a call without
// one.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"

// GCC 12 reports its own _mm512_reduce_* intrinsics (which start from an
// "undefined" vector on purpose) as maybe-uninitialized under -Werror.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace spanc::cpu::attention {

namespace {

/// Every tile is 16 rows of 64 bytes. Scores: 0 and 2 (the two halves),
/// 1 queries, 3 and 7 the halves' key pairs (two registers, so that the
/// second load need not wait for the first product). P.V: 1 and 4 the
/// weights ([Ph | Ph] and [Pl | 0]), 3 and 7 value pairs ([Vh ; Vl]),
/// 0, 2, 5 and 6 the products of four 16-dim chunks.
struct AttentionTileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t bytesPerRow[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AttentionTileConfig) == 64, "LDTILECFG reads 64 bytes");

__attribute__((target("amx-tile"))) void configureAttentionTiles() {
  static const AttentionTileConfig config;
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void releaseAttentionTiles() {
  _tile_release();
}

#define SPANC_AVX512_BF16                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/// Stores 16 (even, odd) pairs as bf16 in AMX's VNNI order: lane i's two
/// values side by side (64 bytes).
SPANC_AVX512_BF16 inline void storePairs(__m512 even, __m512 odd,
                                         uint16_t *out) {
  const __m512i packed =
      reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
  const __m512i interleave = _mm512_set_epi16(
      31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
      6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(interleave, packed));
}

/// What rounding x to bf16 leaves out (exact in f32): x = hi + lo with hi
/// and bf16(lo) both bf16 carries ~16 significant bits.
SPANC_AVX512_BF16 inline __m512 bf16Residual(__m512 x) {
  const __m256bh rounded = _mm512_cvtneps_pbh(x);
  const __m512 high = _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i &>(rounded)), 16));
  return _mm512_sub_ps(x, high);
}

/// K of one block ([dim][16 slots]) as B tiles: dimension pairs x slots,
/// the bf16 high parts at `out`, the low parts headDim * 16 values after.
template <typename Element>
SPANC_AVX512_BF16 void packKeyPairs(const Element *keysByDim, int headDim,
                                    uint16_t *out) {
  uint16_t *low = out + headDim * 16;
  for (int pair = 0; pair < headDim / 2; ++pair) {
    const __m512 even = load16(keysByDim + 2 * pair * 16);
    const __m512 odd = load16(keysByDim + (2 * pair + 1) * 16);
    storePairs(even, odd, out + pair * 32);
    storePairs(bf16Residual(even), bf16Residual(odd), low + pair * 32);
  }
}

/// V of one block ([slot][headDim]) as B tiles, one per 16 dims: 8 rows of
/// slot pairs x dims in bf16 high parts, then 8 rows of the low parts (f16
/// values split exactly); slots past `valid` are zeros (their memory may
/// hold anything, and a zero weight times a NaN is a NaN).
template <typename Element>
SPANC_AVX512_BF16 void packValuePairs(const Element *values, int valid,
                                      int headDim, uint16_t *out) {
  for (int chunk = 0; chunk < headDim / 16; ++chunk)
    for (int pair = 0; pair < 8; ++pair) {
      const int even = 2 * pair, odd = 2 * pair + 1;
      const __m512 zero = _mm512_setzero_ps();
      const __m512 first =
          even < valid ? load16(values + even * headDim + chunk * 16) : zero;
      const __m512 second =
          odd < valid ? load16(values + odd * headDim + chunk * 16) : zero;
      uint16_t *tile = out + chunk * 16 * 32;
      storePairs(first, second, tile + pair * 32);
      storePairs(bf16Residual(first), bf16Residual(second),
                 tile + (8 + pair) * 32);
    }
}

/// The tile's scaled queries as A tiles: 16 rows of headDim bf16 (rows past
/// the tile zero), the high parts at `out`, the low parts 16 * headDim
/// values after.
SPANC_AVX512_BF16 void packQueries(const TileState &tile, int headDim,
                                   uint16_t *out) {
  uint16_t *low = out + kMaxRows * headDim;
  for (int row = 0; row < kMaxRows; ++row)
    for (int dim = 0; dim < headDim; dim += 16) {
      const __m512 values =
          row < tile.rows ? _mm512_loadu_ps(tile.query + row * headDim + dim)
                          : _mm512_setzero_ps();
      const __m256bh high = _mm512_cvtneps_pbh(values);
      const __m256bh rest = _mm512_cvtneps_pbh(bf16Residual(values));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i *>(out + row * headDim + dim),
          reinterpret_cast<const __m256i &>(high));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i *>(low + row * headDim + dim),
          reinterpret_cast<const __m256i &>(rest));
    }
}

/// One page of a pair as the AMX step reads it: packed K and V, or absent
/// (keys null: an empty page, one past the item's range or past every
/// row's limit).
struct PackedPage {
  const uint16_t *keys = nullptr;
  const uint16_t *values = nullptr;
  int valid = 0;
  int64_t logicalStart = 0;
};

/// A value tile of zeros, for the P.V product of an absent half (its
/// weights are zero; its memory must still hold numbers).
alignas(64) const uint16_t kZeroValuePairs[16 * 32] = {};
/// Eight rows of bf16 ones over eight of zeros: [Ph | Ph] and [Pl | 0]
/// times it sum each row's weights.
struct OnesTile {
  alignas(64) uint16_t values[16 * 32] = {};
  OnesTile() { std::fill(values, values + 8 * 32, uint16_t(0x3f80)); }
};
const OnesTile kOnes;

/// C[slot] += A1 . B + A2 . B for the P.V chunk held in accumulator `slot`
/// (tiles 0, 2, 5, 6), with B loaded into tile 3 or 7.
__attribute__((target("amx-tile,amx-bf16"))) inline void
accumulateChunk(int slot, const uint16_t *values) {
  switch (slot) {
  case 0:
    _tile_loadd(3, values, 64);
    _tile_dpbf16ps(0, 1, 3);
    _tile_dpbf16ps(0, 4, 3);
    break;
  case 1:
    _tile_loadd(7, values, 64);
    _tile_dpbf16ps(2, 1, 7);
    _tile_dpbf16ps(2, 4, 7);
    break;
  case 2:
    _tile_loadd(3, values, 64);
    _tile_dpbf16ps(5, 1, 3);
    _tile_dpbf16ps(5, 4, 3);
    break;
  default:
    _tile_loadd(7, values, 64);
    _tile_dpbf16ps(6, 1, 7);
    _tile_dpbf16ps(6, 4, 7);
    break;
  }
}

__attribute__((target("amx-tile"))) inline void zeroChunk(int slot) {
  switch (slot) {
  case 0:
    _tile_zero(0);
    break;
  case 1:
    _tile_zero(2);
    break;
  case 2:
    _tile_zero(5);
    break;
  default:
    _tile_zero(6);
    break;
  }
}

__attribute__((target("amx-tile"))) inline void storeChunk(int slot, float *out,
                                                           int64_t rowBytes) {
  switch (slot) {
  case 0:
    _tile_stored(0, out, rowBytes);
    break;
  case 1:
    _tile_stored(2, out, rowBytes);
    break;
  case 2:
    _tile_stored(5, out, rowBytes);
    break;
  default:
    _tile_stored(6, out, rowBytes);
    break;
  }
}

/// The AMX step: folds a pair of pages into the tile state (see above).
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,"
                      "avx512bf16"))) void
foldPairAmx(const CallContext &context, TileState &tile,
            const uint16_t *queries, const PackedPage (&pages)[2]) {
  const int headDim = context.shape->headDim;
  alignas(64) int counts[2][kMaxRows];
  int firstRow = tile.rows;
  for (int half = 0; half < 2; ++half) {
    if (!pages[half].keys) {
      std::fill(counts[half], counts[half] + kMaxRows, 0);
      continue;
    }
    firstRow =
        std::min(firstRow, visibleRows(tile, pages[half].valid,
                                       pages[half].logicalStart, counts[half]));
  }
  if (firstRow == tile.rows)
    return;
  alignas(64) float scores[2][kMaxRows * 16];
  // Scores to ~16 significant bits: Qh.Kh + Qh.Kl + Ql.Kh per 32 dims (the
  // softmax exponentiates them, so a bf16 score error would move weights
  // by percents).
  const uint16_t *queriesLow = queries + kMaxRows * headDim;
  const int64_t lowKeys = int64_t(headDim) * 16;
  const bool hasFirst = pages[0].keys, hasSecond = pages[1].keys;
  _tile_zero(0);
  _tile_zero(2);
  for (int dim = 0; dim < headDim; dim += 32) {
    for (int term = 0; term < 3; ++term) {
      const uint16_t *rows = term == 2 ? queriesLow : queries;
      const int64_t keyOffset = dim * 16 + (term == 1 ? lowKeys : 0);
      if (term != 1)
        _tile_loadd(1, rows + dim, headDim * 2);
      if (hasFirst)
        _tile_loadd(3, pages[0].keys + keyOffset, 64);
      if (hasSecond)
        _tile_loadd(7, pages[1].keys + keyOffset, 64);
      if (hasFirst)
        _tile_dpbf16ps(0, 1, 3);
      if (hasSecond)
        _tile_dpbf16ps(2, 1, 7);
    }
  }
  _tile_stored(0, scores[0], 64);
  _tile_stored(2, scores[1], 64);

  const __m512 negativeInfinity = _mm512_set1_ps(kNegativeInfinity);
  alignas(64) float pairMax[kMaxRows];
  for (int row = 0; row < kMaxRows; ++row)
    pairMax[row] = kNegativeInfinity;
  for (int row = firstRow; row < tile.rows; ++row) {
    const __m512 first = _mm512_mask_loadu_ps(
        negativeInfinity, __mmask16((1u << counts[0][row]) - 1),
        scores[0] + row * 16);
    const __m512 second = _mm512_mask_loadu_ps(
        negativeInfinity, __mmask16((1u << counts[1][row]) - 1),
        scores[1] + row * 16);
    pairMax[row] = _mm512_reduce_max_ps(_mm512_max_ps(first, second));
  }
  alignas(64) float corrections[kMaxRows];
  alignas(64) float newMax[kMaxRows];
  _mm512_store_ps(newMax, updateMaxima(tile, firstRow, _mm512_load_ps(pairMax),
                                       corrections));
  // Per half, the weights' bf16 high and low parts as two A tiles,
  // [Ph | Ph] and [Pl | 0] (16 rows x 32 values), so that against a value
  // tile [Vh ; Vl] the two products add Ph.Vh + Ph.Vl + Pl.Vh.
  alignas(64) uint16_t weightTiles[2][2][kMaxRows * 32] = {};
  for (int row = firstRow; row < tile.rows; ++row)
    for (int half = 0; half < 2; ++half) {
      const __mmask16 mask = __mmask16((1u << counts[half][row]) - 1);
      const __m512 weight = _mm512_maskz_mov_ps(
          mask, exp512(_mm512_sub_ps(
                    _mm512_maskz_loadu_ps(mask, scores[half] + row * 16),
                    _mm512_set1_ps(newMax[row]))));
      const __m256bh high = _mm512_cvtneps_pbh(weight);
      const __m256bh low = _mm512_cvtneps_pbh(bf16Residual(weight));
      const __m256i highBits = reinterpret_cast<const __m256i &>(high);
      uint16_t *doubled = weightTiles[half][0] + row * 32;
      _mm256_store_si256(reinterpret_cast<__m256i *>(doubled), highBits);
      _mm256_store_si256(reinterpret_cast<__m256i *>(doubled + 16), highBits);
      _mm256_store_si256(
          reinterpret_cast<__m256i *>(weightTiles[half][1] + row * 32),
          reinterpret_cast<const __m256i &>(low));
    }

  // P.V in groups of four 16-dim chunks (four accumulator tiles), both
  // halves into each; then P x ones, the row sums.
  alignas(64) float products[kMaxRows * kernels::kMaxHeadDim];
  const int chunks = headDim / 16;
  for (int group = 0; group < chunks; group += 4) {
    const int count = std::min(4, chunks - group);
    for (int slot = 0; slot < count; ++slot)
      zeroChunk(slot);
    for (int half = 0; half < 2; ++half) {
      _tile_loadd(1, weightTiles[half][0], 64);
      _tile_loadd(4, weightTiles[half][1], 64);
      for (int slot = 0; slot < count; ++slot)
        accumulateChunk(slot, pages[half].keys ? pages[half].values +
                                                     (group + slot) * 16 * 32
                                               : kZeroValuePairs);
    }
    for (int slot = 0; slot < count; ++slot)
      storeChunk(slot, products + (group + slot) * 16, headDim * 4);
  }
  alignas(64) float sums[kMaxRows * 16];
  zeroChunk(0);
  for (int half = 0; half < 2; ++half) {
    _tile_loadd(1, weightTiles[half][0], 64);
    _tile_loadd(4, weightTiles[half][1], 64);
    accumulateChunk(0, kOnes.values);
  }
  storeChunk(0, sums, 64);
  // Column 0 of the sums tile: each row's weight sum.
  const __m512 pairSums =
      _mm512_i32gather_ps(_mm512_set_epi32(240, 224, 208, 192, 176, 160, 144,
                                           128, 112, 96, 80, 64, 48, 32, 16, 0),
                          sums, sizeof(float));
  updateSums(tile, firstRow, corrections, pairSums);
  for (int row = firstRow; row < tile.rows; ++row) {
    float *accumulator = tile.accumulator + row * headDim;
    const float *rowProducts = products + row * headDim;
    const __m512 correction = _mm512_set1_ps(corrections[row]);
    for (int dim = 0; dim < headDim; dim += 16)
      _mm512_storeu_ps(accumulator + dim,
                       _mm512_fmadd_ps(_mm512_loadu_ps(accumulator + dim),
                                       correction,
                                       _mm512_loadu_ps(rowProducts + dim)));
  }
}

} // namespace

/// The AMX path of runItem over the item's pages (f16 K/V): packs the
/// queries once, each page's K and V once per thread (through the block
/// cache, when the call has one) or per block, and folds them in.
void foldPagesAmx(const CallContext &context, const AttentionWorkItem &item,
                  TileState &tile, float *blockCache, int32_t *blockCacheTags) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = context.shape->headDim;
  const int64_t blockElements = int64_t(headDim) * 16;
  alignas(64) float rotatedKeys[kernels::kMaxHeadDim * kernels::kMaxBlockSize];
  alignas(64) uint16_t queries[2 * kMaxRows * kernels::kMaxHeadDim];
  packQueries(tile, headDim, queries);
  const int64_t lastLimit = tile.limit[tile.rows - 1];
  alignas(64) uint16_t keyPairs[2][2 * kernels::kMaxHeadDim * 16];
  alignas(64) uint16_t valuePairs[2][2 * kernels::kMaxHeadDim * 16];
  configureAttentionTiles();
  for (int32_t first = item.pageBegin; first < item.pageEnd; first += 2) {
    if (context.pageStarts[first] > lastLimit)
      break;
    PackedPage pages[2];
    for (int half = 0; half < 2; ++half) {
      const int32_t page = first + half;
      if (page >= item.pageEnd)
        break;
      const int valid = batch.validTokens[page];
      const int64_t logicalStart = context.pageStarts[page];
      if (valid == 0 || logicalStart > lastLimit)
        continue;
      const int64_t offset = int64_t(batch.blockIds[page]) * kv.blockStride +
                             item.kvHead * kv.headStride;
      const uint16_t *keyBlock =
          static_cast<const uint16_t *>(kv.keys) + offset;
      const uint16_t *valueBlock =
          static_cast<const uint16_t *>(kv.values) + offset;
      uint16_t *keys = keyPairs[half], *values = valuePairs[half];
      bool packed = false;
      if (blockCache) {
        // The thread's packed copy of this page for this KV head: K's and
        // V's high and low parts, 4 * blockElements halves, exactly the
        // entry's 2 * blockElements floats.
        keys = reinterpret_cast<uint16_t *>(blockCache +
                                            int64_t(page) * 2 * blockElements);
        values = keys + 2 * blockElements;
        packed = blockCacheTags[page] == item.kvHead + 1;
        blockCacheTags[page] = item.kvHead + 1;
      }
      if (!packed) {
        if (context.options->keyRope) {
          rotateKeyBlockAvx512(context, keyBlock, logicalStart, rotatedKeys);
          packKeyPairs(static_cast<const float *>(rotatedKeys), headDim, keys);
        } else {
          packKeyPairs(keyBlock, headDim, keys);
        }
        packValuePairs(valueBlock, valid, headDim, values);
      }
      pages[half] = PackedPage{keys, values, valid, logicalStart};
    }
    foldPairAmx(context, tile, queries, pages);
  }
  releaseAttentionTiles();
}

} // namespace spanc::cpu::attention
