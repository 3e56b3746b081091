//===- Attention.cpp - Paged causal attention on the CPU ------------------===//
//
// A tile is up to kMaxRows query rows (token x head-in-group pairs) of one
// sequence and KV head. For each visible page the tile computes its scores
// against the block's (up to 16) keys, folds them into per-row online
// softmax states (running max, running sum, accumulator), and never
// materializes a score row. K/V elements (f32 or IEEE half) are converted
// to f32 as they are loaded, inside the score and value loops; everything
// is computed in f32. The AVX-512 path needs blockSize 16 and headDim % 16
// == 0; the scalar path takes any shape and is the reference the fast path
// is tested against. The AVX-512 path has two tile steps: decode-size tiles
// (foldBlockByRow) score one vector of slots per row; prefill tiles
// (foldBlockByDim) hold the 16 rows as vector lanes, so the softmax
// bookkeeping is lane-wise with no horizontal reduction per row. Both do
// the same float operations per row in the same order (test:
// RowResultsDoNotDependOnTheTile), because the executor needs a span-cache
// hit's short tail to give the bits the long prompt gave. P.V runs over
// groups of rows sharing each value load. With f16 K/V on a CPU with AMX,
// every tile of a sequence of several queries takes the AMX path instead
// (foldPairAmx: bf16 high/low products, f32 sums; see there), which keeps
// the same per-row contract; single-query sequences (decode) stay in f32.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Attention.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"

// GCC 12 reports its own _mm512_reduce_* intrinsics (which start from an
// "undefined" vector on purpose) as maybe-uninitialized under -Werror.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace spanc::cpu {

namespace {

constexpr int kMaxRows = 16;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlockSize = 64;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

/// What every tile of one call shares.
struct CallContext {
  const PagedAttentionShape *shape;
  const PagedKvView *kv;
  const PagedAttentionOptions *options;
  const PagedAttentionBatch *batch;
  const int64_t *pageStarts;
  const float *queries;
};

/// The per-row online softmax state of one tile, plus its scaled queries.
struct TileState {
  int rows = 0;
  int64_t limit[kMaxRows]; ///< last visible logical key index per row
  /// Running max (-inf before any key); rows past `rows` stay -inf so the
  /// fast path can treat the 16 maxima as one vector.
  alignas(64) float maxScore[kMaxRows];
  alignas(64) float sum[kMaxRows]; ///< running sum of exp(score - max)
  alignas(64) float query[kMaxRows * kMaxHeadDim];
  /// The same queries dimension-major (the 16 rows of one dim are one
  /// vector; rows past `rows` zero) for foldBlockByDim.
  alignas(64) float queryByDim[kMaxHeadDim * kMaxRows];
  alignas(64) float accumulator[kMaxRows * kMaxHeadDim];
};

/// Copies the block's K for one head into `out` as f32 (same
/// dimension-major layout) with each valid slot rotated to its logical
/// index (rope-in-kernel); the scalar reference.
template <typename Element>
void rotateKeyBlockScalar(const CallContext &context, const Element *keyBlock,
                          int valid, int64_t logicalStart, float *out) {
  const PagedKvView &kv = *context.kv;
  const RopeTable &table = *context.options->keyRope;
  const int64_t count = int64_t(context.shape->headDim) * kv.blockSize;
  for (int64_t index = 0; index < count; ++index)
    out[index] = loadElement(keyBlock + index);
  for (int slot = 0; slot < valid; ++slot)
    rotateHead(table.config().order, table.config().rotaryDim,
               table.row(logicalStart + slot), out + slot, kv.blockSize);
}

/// The same for 16-slot blocks: a pair's two dimension rows are two
/// vectors, its cos/sin at the 16 consecutive logical indices two loads
/// from the pair-major table (slots past `valid` are rotated too, by the
/// next positions' angles, and never scored). Same arithmetic as
/// rotateHead (a*c - b*s, a*s + b*c).
template <typename Element>
SPANC_AVX512 void rotateKeyBlockAvx512(const CallContext &context,
                                       const Element *keyBlock,
                                       int64_t logicalStart, float *out) {
  const RopeTable &table = *context.options->keyRope;
  const int headDim = context.shape->headDim;
  const int rotaryDim = table.config().rotaryDim;
  const int half = rotaryDim / 2;
  const bool normal = table.config().order == RopeOrder::Normal;
  for (int pair = 0; pair < half; ++pair) {
    const int first = normal ? 2 * pair : pair;
    const int second = normal ? 2 * pair + 1 : pair + half;
    const __m512 c = _mm512_loadu_ps(table.cosByPosition(pair) + logicalStart);
    const __m512 s = _mm512_loadu_ps(table.sinByPosition(pair) + logicalStart);
    const __m512 a = load16(keyBlock + first * 16);
    const __m512 b = load16(keyBlock + second * 16);
    _mm512_storeu_ps(out + first * 16,
                     _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
    _mm512_storeu_ps(out + second * 16,
                     _mm512_add_ps(_mm512_mul_ps(a, s), _mm512_mul_ps(b, c)));
  }
  for (int dim = rotaryDim; dim < headDim; ++dim)
    _mm512_storeu_ps(out + dim * 16, load16(keyBlock + dim * 16));
}

/// Tiles of more rows than this widen f16 blocks to f32 once per block.
constexpr int kRowsToWidenBlock = 4;

/// The most floats the per-thread block caches may take together (256 MiB;
/// a 16k-token prompt takes 8 MiB per thread with head dim 64).
constexpr int64_t kMaxBlockCacheFloats = int64_t(64) << 20;

/// count (a multiple of 16) elements as f32.
template <typename Element>
SPANC_AVX512 void widenBlock(const Element *in, int64_t count, float *out) {
  for (int64_t index = 0; index < count; index += 16)
    _mm512_storeu_ps(out + index, load16(in + index));
}

/// The scalar tile step: folds one block's keys into the tile state.
template <typename KeyElement, typename ValueElement>
void foldBlockScalar(const CallContext &context, TileState &tile,
                     const KeyElement *keyBlock, const ValueElement *valueBlock,
                     int valid, int64_t logicalStart) {
  const int headDim = context.shape->headDim;
  const int blockSize = context.kv->blockSize;
  float scores[kMaxBlockSize];
  for (int row = 0; row < tile.rows; ++row) {
    int64_t count =
        std::min<int64_t>(valid, tile.limit[row] - logicalStart + 1);
    if (count <= 0)
      continue;
    const float *query = tile.query + row * headDim;
    float blockMax = kNegativeInfinity;
    for (int slot = 0; slot < count; ++slot) {
      float dot = 0;
      for (int dim = 0; dim < headDim; ++dim)
        dot += query[dim] * loadElement(keyBlock + dim * blockSize + slot);
      scores[slot] = dot;
      blockMax = std::max(blockMax, dot);
    }
    float newMax = std::max(tile.maxScore[row], blockMax);
    float correction = std::exp(tile.maxScore[row] - newMax);
    float *accumulator = tile.accumulator + row * headDim;
    for (int dim = 0; dim < headDim; ++dim)
      accumulator[dim] *= correction;
    float blockSum = 0;
    for (int slot = 0; slot < count; ++slot) {
      float weight = std::exp(scores[slot] - newMax);
      blockSum += weight;
      const ValueElement *value = valueBlock + slot * headDim;
      for (int dim = 0; dim < headDim; ++dim)
        accumulator[dim] += weight * loadElement(value + dim);
    }
    tile.sum[row] = tile.sum[row] * correction + blockSum;
    tile.maxScore[row] = newMax;
  }
}

/// Scores of `Rows` query rows against the 16 slots of one block:
/// out[r][slot] = sum_d query[r][d] * key[d][slot].
template <int Rows, typename KeyElement>
SPANC_AVX512 inline void scoreRows(const float *query, int headDim,
                                   const KeyElement *keyBlock, float *out) {
  __m512 accumulators[Rows];
  for (int row = 0; row < Rows; ++row)
    accumulators[row] = _mm512_setzero_ps();
  for (int dim = 0; dim < headDim; ++dim) {
    __m512 keys = load16(keyBlock + dim * 16);
    for (int row = 0; row < Rows; ++row)
      accumulators[row] = _mm512_fmadd_ps(
          _mm512_set1_ps(query[row * headDim + dim]), keys, accumulators[row]);
  }
  for (int row = 0; row < Rows; ++row)
    _mm512_storeu_ps(out + row * 16, accumulators[row]);
}

template <typename KeyElement>
SPANC_AVX512 void scoreTile(const float *query, int rows, int headDim,
                            const KeyElement *keyBlock, float *out) {
  int row = 0;
  for (; row + 8 <= rows; row += 8)
    scoreRows<8>(query + row * headDim, headDim, keyBlock, out + row * 16);
  switch (rows - row) {
  case 7:
    scoreRows<7>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 6:
    scoreRows<6>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 5:
    scoreRows<5>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 4:
    scoreRows<4>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 3:
    scoreRows<3>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 2:
    scoreRows<2>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  case 1:
    scoreRows<1>(query + row * headDim, headDim, keyBlock, out + row * 16);
    break;
  default:
    break;
  }
}

/// P.V for `Rows` consecutive rows that see the same `count` slots of a
/// block, over `Chunks` 16-dim chunks: each value vector is loaded once for
/// all rows, and the Rows x Chunks accumulator chains are independent (one
/// row's chunks are too few chains to hide the FMA latency). Row r's weight
/// of slot s is weights[r * rowStep + s * slotStep]. Every row computes
/// exactly
///   acc = acc * correction; for slot in [0, count): acc += w[slot] * v[slot]
/// in that order, so its result does not depend on which rows share the
/// group.
template <int Rows, int Chunks, typename ValueElement>
SPANC_AVX512 inline void
accumulateRows(float *accumulator, int headDim, const float *corrections,
               const float *weights, int rowStep, int slotStep,
               const ValueElement *value, int count) {
  __m512 sums[Rows][Chunks];
  for (int row = 0; row < Rows; ++row) {
    const __m512 scale = _mm512_set1_ps(corrections[row]);
    for (int chunk = 0; chunk < Chunks; ++chunk)
      sums[row][chunk] = _mm512_mul_ps(
          _mm512_loadu_ps(accumulator + row * headDim + chunk * 16), scale);
  }
  for (int slot = 0; slot < count; ++slot) {
    __m512 values[Chunks];
    for (int chunk = 0; chunk < Chunks; ++chunk)
      values[chunk] = load16(value + slot * headDim + chunk * 16);
    for (int row = 0; row < Rows; ++row) {
      const __m512 weight =
          _mm512_set1_ps(weights[row * rowStep + slot * slotStep]);
      for (int chunk = 0; chunk < Chunks; ++chunk)
        sums[row][chunk] =
            _mm512_fmadd_ps(weight, values[chunk], sums[row][chunk]);
    }
  }
  for (int row = 0; row < Rows; ++row)
    for (int chunk = 0; chunk < Chunks; ++chunk)
      _mm512_storeu_ps(accumulator + row * headDim + chunk * 16,
                       sums[row][chunk]);
}

/// accumulateRows over all chunks of the head, four at a time.
template <int Rows, typename ValueElement>
SPANC_AVX512 inline void
accumulateRowGroup(float *accumulator, int headDim, const float *corrections,
                   const float *weights, int rowStep, int slotStep,
                   const ValueElement *value, int count) {
  const int chunks = headDim / 16;
  int chunk = 0;
  for (; chunk + 4 <= chunks; chunk += 4)
    accumulateRows<Rows, 4>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, slotStep, value + chunk * 16,
                            count);
  switch (chunks - chunk) {
  case 3:
    accumulateRows<Rows, 3>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, slotStep, value + chunk * 16,
                            count);
    break;
  case 2:
    accumulateRows<Rows, 2>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, slotStep, value + chunk * 16,
                            count);
    break;
  case 1:
    accumulateRows<Rows, 1>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, slotStep, value + chunk * 16,
                            count);
    break;
  default:
    break;
  }
}

/// Rows per P.V group: 4 rows x 4 chunks = 16 accumulators, plus the 4
/// shared value vectors and a weight, fit the 32 vector registers.
constexpr int kRowsPerGroup = 4;

/// P.V of rows [firstRow, tile.rows) over runs of rows with the same count
/// (all rows off the diagonal; on it, the heads of one token).
template <typename ValueElement>
SPANC_AVX512 void accumulateTile(TileState &tile, int headDim, int firstRow,
                                 const int *counts, const float *corrections,
                                 const float *weights, int rowStep,
                                 int slotStep, const ValueElement *valueBlock) {
  for (int row = firstRow; row < tile.rows;) {
    int rows = 1;
    while (rows < kRowsPerGroup && row + rows < tile.rows &&
           counts[row + rows] == counts[row])
      ++rows;
    float *accumulator = tile.accumulator + row * headDim;
    const float *rowWeights = weights + row * rowStep;
    switch (rows) {
    case 4:
      accumulateRowGroup<4>(accumulator, headDim, corrections + row, rowWeights,
                            rowStep, slotStep, valueBlock, counts[row]);
      break;
    case 3:
      accumulateRowGroup<3>(accumulator, headDim, corrections + row, rowWeights,
                            rowStep, slotStep, valueBlock, counts[row]);
      break;
    case 2:
      accumulateRowGroup<2>(accumulator, headDim, corrections + row, rowWeights,
                            rowStep, slotStep, valueBlock, counts[row]);
      break;
    default:
      accumulateRowGroup<1>(accumulator, headDim, corrections + row, rowWeights,
                            rowStep, slotStep, valueBlock, counts[row]);
      break;
    }
    row += rows;
  }
}

/// The online softmax update of rows [firstRow, tile.rows) from this
/// block's maxima: newMax = max(old, blockMax); correction = e^(old -
/// newMax), 0 for a row's first block (old max -inf). One vector over the
/// 16 rows, so no row pays a scalar exp per block.
SPANC_AVX512 inline __m512 updateMaxima(TileState &tile, int firstRow,
                                        __m512 blockMax, float *corrections) {
  const __m512 oldMax = _mm512_load_ps(tile.maxScore);
  const __m512 newMax = _mm512_max_ps(oldMax, blockMax);
  const __mmask16 seen = _mm512_cmp_ps_mask(
      oldMax, _mm512_set1_ps(kNegativeInfinity), _CMP_NEQ_OQ);
  _mm512_store_ps(
      corrections,
      _mm512_maskz_mov_ps(seen, exp512(_mm512_sub_ps(oldMax, newMax))));
  const __mmask16 rows =
      __mmask16(((1u << tile.rows) - 1) & ~((1u << firstRow) - 1));
  _mm512_mask_store_ps(tile.maxScore, rows, newMax);
  return newMax;
}

/// sum = sum * correction + blockSum for rows [firstRow, tile.rows).
SPANC_AVX512 inline void updateSums(TileState &tile, int firstRow,
                                    const float *corrections,
                                    __m512 blockSums) {
  const __mmask16 rows =
      __mmask16(((1u << tile.rows) - 1) & ~((1u << firstRow) - 1));
  const __m512 sums = _mm512_load_ps(tile.sum);
  _mm512_mask_store_ps(
      tile.sum, rows,
      _mm512_add_ps(_mm512_mul_ps(sums, _mm512_load_ps(corrections)),
                    blockSums));
}

/// The first row that sees any of the block (limits grow with the row, so
/// every later row sees at least one slot), and each row's slot count.
inline int visibleRows(const TileState &tile, int valid, int64_t logicalStart,
                       int *counts) {
  int firstRow = kMaxRows;
  for (int row = 0; row < kMaxRows; ++row) {
    int64_t count =
        row < tile.rows
            ? std::min<int64_t>(valid, tile.limit[row] - logicalStart + 1)
            : 0;
    counts[row] = int(std::max<int64_t>(0, count));
    if (count > 0 && firstRow == kMaxRows)
      firstRow = row;
  }
  return std::min(firstRow, tile.rows);
}

/// The AVX-512 tile step for few rows (decode), scores one row vector per
/// query row (blockSize 16, headDim % 16 == 0).
template <typename KeyElement, typename ValueElement>
SPANC_AVX512 void foldBlockByRow(const CallContext &context, TileState &tile,
                                 const KeyElement *keyBlock,
                                 const ValueElement *valueBlock, int valid,
                                 int64_t logicalStart) {
  const int headDim = context.shape->headDim;
  alignas(64) float scores[kMaxRows * 16];
  alignas(64) float blockMax[kMaxRows];
  alignas(64) float corrections[kMaxRows];
  alignas(64) float blockSums[kMaxRows] = {};
  alignas(64) float weights[kMaxRows * 16];
  alignas(64) int counts[kMaxRows];
  const int firstRow = visibleRows(tile, valid, logicalStart, counts);
  if (firstRow == tile.rows)
    return;
  scoreTile(tile.query + firstRow * headDim, tile.rows - firstRow, headDim,
            keyBlock, scores + firstRow * 16);
  const __m512 negativeInfinity = _mm512_set1_ps(kNegativeInfinity);
  for (int row = 0; row < kMaxRows; ++row)
    blockMax[row] = kNegativeInfinity;
  for (int row = firstRow; row < tile.rows; ++row) {
    __mmask16 mask = __mmask16((1u << counts[row]) - 1);
    blockMax[row] = _mm512_reduce_max_ps(
        _mm512_mask_loadu_ps(negativeInfinity, mask, scores + row * 16));
  }
  alignas(64) float newMax[kMaxRows];
  _mm512_store_ps(newMax, updateMaxima(tile, firstRow, _mm512_load_ps(blockMax),
                                       corrections));
  for (int row = firstRow; row < tile.rows; ++row) {
    __mmask16 mask = __mmask16((1u << counts[row]) - 1);
    __m512 weightRow = _mm512_maskz_mov_ps(
        mask,
        exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + row * 16),
                             _mm512_set1_ps(newMax[row]))));
    // sumLanes' tree, which foldBlockByDim reproduces lane-wise over 16
    // rows at once.
    blockSums[row] = sumLanes(weightRow);
    _mm512_store_ps(weights + row * 16, weightRow);
  }
  updateSums(tile, firstRow, corrections, _mm512_load_ps(blockSums));
  accumulateTile(tile, headDim, firstRow, counts, corrections, weights, 16, 1,
                 valueBlock);
}

/// The AVX-512 tile step for many rows (prefill), with the rows as vector
/// lanes: scores are one vector of 16 rows per key slot (queries
/// dimension-major, each key element broadcast), so the block max, the
/// weights and their sums are lane-wise over rows instead of horizontal
/// reductions per row. Each row's operations are exactly foldBlockByRow's:
/// the same FMA chain over dims per score, max (exact in any order), the
/// same exp512 per lane and sumLanes' tree order for the block sum; so a
/// row gives the same bits in a decode-size tile as in a full one. Keys and
/// values are f32 (callers widen f16 blocks for tiles this large).
SPANC_AVX512 void foldBlockByDim(const CallContext &context, TileState &tile,
                                 const float *keyBlock, const float *valueBlock,
                                 int valid, int64_t logicalStart) {
  const int headDim = context.shape->headDim;
  alignas(64) int counts[kMaxRows];
  alignas(64) float corrections[kMaxRows];
  alignas(64) float weights[16 * kMaxRows]; ///< [slot][row]
  const int firstRow = visibleRows(tile, valid, logicalStart, counts);
  if (firstRow == tile.rows)
    return;
  __m512 scores[16];
  for (int slot = 0; slot < 16; ++slot)
    scores[slot] = _mm512_setzero_ps();
  for (int dim = 0; dim < headDim; ++dim) {
    const __m512 query = _mm512_load_ps(tile.queryByDim + dim * kMaxRows);
    const float *keys = keyBlock + dim * 16;
    for (int slot = 0; slot < 16; ++slot)
      scores[slot] =
          _mm512_fmadd_ps(query, _mm512_set1_ps(keys[slot]), scores[slot]);
  }
  const __m512i rowCounts =
      _mm512_load_si512(reinterpret_cast<const void *>(counts));
  __mmask16 sees[16]; ///< per slot: the rows that see it
  __m512 blockMax = _mm512_set1_ps(kNegativeInfinity);
  for (int slot = 0; slot < 16; ++slot) {
    sees[slot] = _mm512_cmpgt_epi32_mask(rowCounts, _mm512_set1_epi32(slot));
    blockMax = _mm512_mask_max_ps(blockMax, sees[slot], blockMax, scores[slot]);
  }
  const __m512 newMax = updateMaxima(tile, firstRow, blockMax, corrections);
  for (int slot = 0; slot < 16; ++slot)
    scores[slot] = _mm512_maskz_mov_ps(
        sees[slot], exp512(_mm512_sub_ps(scores[slot], newMax)));
  for (int slot = 0; slot < 16; ++slot)
    _mm512_store_ps(weights + slot * kMaxRows, scores[slot]);
  for (int slot = 0; slot < 8; ++slot)
    scores[slot] = _mm512_add_ps(scores[slot], scores[slot + 8]);
  for (int slot = 0; slot < 4; ++slot)
    scores[slot] = _mm512_add_ps(scores[slot], scores[slot + 4]);
  for (int slot = 0; slot < 2; ++slot)
    scores[slot] = _mm512_add_ps(scores[slot], scores[slot + 2]);
  updateSums(tile, firstRow, corrections, _mm512_add_ps(scores[0], scores[1]));
  accumulateTile(tile, headDim, firstRow, counts, corrections, weights, 1,
                 kMaxRows, valueBlock);
}

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
  alignas(64) float products[kMaxRows * kMaxHeadDim];
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

/// Writes a finished tile: its split state (max, sum, accumulator per row)
/// or, unsplit, its normalized output rows.
void finishItem(const CallContext &context, const AttentionWorkItem &item,
                const TileState &tile, float *partial, float *output) {
  const PagedAttentionShape &shape = *context.shape;
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int32_t firstQueryRow = context.batch->queryOffsets[item.sequence];
  if (partial) {
    // Split state per row: max, sum, then headDim accumulator floats.
    for (int row = 0; row < tile.rows; ++row) {
      float *state = partial + row * (2 + headDim);
      state[0] = tile.maxScore[row];
      state[1] = tile.sum[row];
      std::memcpy(state + 2, tile.accumulator + row * headDim,
                  sizeof(float) * headDim);
    }
    return;
  }
  for (int row = 0; row < tile.rows; ++row) {
    int tileRow = item.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = item.kvHead * groupSize + tileRow % groupSize;
    float *out = output + (firstQueryRow + token) * shape.outputRowStride +
                 int64_t(head) * headDim;
    float inverse = tile.sum[row] > 0 ? 1.0f / tile.sum[row] : 0.0f;
    for (int dim = 0; dim < headDim; ++dim)
      out[dim] = tile.accumulator[row * headDim + dim] * inverse;
  }
}

/// The AMX path of runItem over the item's pages (f16 K/V): packs the
/// queries once, each page's K and V once per thread (through the block
/// cache, when the call has one) or per block, and folds them in.
void runItemAmx(const CallContext &context, const AttentionWorkItem &item,
                TileState &tile, float *rotatedKeys, float *blockCache,
                int32_t *blockCacheTags) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = context.shape->headDim;
  const int64_t blockElements = int64_t(headDim) * 16;
  alignas(64) uint16_t queries[2 * kMaxRows * kMaxHeadDim];
  packQueries(tile, headDim, queries);
  const int64_t lastLimit = tile.limit[tile.rows - 1];
  alignas(64) uint16_t keyPairs[2][2 * kMaxHeadDim * 16];
  alignas(64) uint16_t valuePairs[2][2 * kMaxHeadDim * 16];
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

/// queryByDim[dim][row] = base[rowOffsets[row] + dim] * scale for the
/// tile's rows, 0 for the 16 - rows lanes past them: one gather per dim
/// instead of a scalar transposition (a split tile folds only a few pages,
/// so its setup is not negligible).
SPANC_AVX512 void gatherQueriesByDim(const float *base,
                                     const int32_t *rowOffsets, int rows,
                                     int headDim, float scale,
                                     float *queryByDim) {
  const __mmask16 mask = __mmask16((1u << rows) - 1);
  const __m512i offsets = _mm512_maskz_loadu_epi32(mask, rowOffsets);
  const __m512 scales = _mm512_set1_ps(scale);
  for (int dim = 0; dim < headDim; ++dim)
    _mm512_store_ps(queryByDim + dim * kMaxRows,
                    _mm512_maskz_mul_ps(mask,
                                        _mm512_mask_i32gather_ps(
                                            _mm512_setzero_ps(), mask, offsets,
                                            base + dim, sizeof(float)),
                                        scales));
}

/// Runs one work item: a tile of rows against a range of its pages.
template <typename Element>
void runItem(const CallContext &context, const AttentionWorkItem &item,
             bool useAvx512, bool useAmx, float *partial, float *output,
             float *blockCache, int32_t *blockCacheTags) {
  const PagedAttentionShape &shape = *context.shape;
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int32_t firstQueryRow = batch.queryOffsets[item.sequence];
  const int64_t numQueries =
      batch.queryOffsets[item.sequence + 1] - firstQueryRow;
  const int32_t sequencePages = batch.pageOffsets[item.sequence + 1];
  const int64_t length = context.pageStarts[sequencePages - 1] +
                         batch.validTokens[sequencePages - 1];

  TileState tile;
  tile.rows = item.numRows;
  std::fill(tile.maxScore, tile.maxScore + kMaxRows, kNegativeInfinity);
  std::fill(tile.sum, tile.sum + kMaxRows, 0.0f);
  // foldBlockByDim reads only queryByDim, the other paths only query.
  const bool byDim = useAvx512 && !useAmx && tile.rows > kRowsToWidenBlock;
  alignas(64) int32_t rowOffsets[kMaxRows] = {};
  bool offsetsFit = true;
  for (int row = 0; row < tile.rows; ++row) {
    int tileRow = item.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = item.kvHead * groupSize + tileRow % groupSize;
    tile.limit[row] = length - numQueries + token;
    tile.maxScore[row] = kNegativeInfinity;
    tile.sum[row] = 0;
    const int64_t offset =
        token * shape.queryRowStride + int64_t(head) * headDim;
    rowOffsets[row] = int32_t(offset);
    offsetsFit &= offset <= std::numeric_limits<int32_t>::max() - headDim;
    if (!byDim) {
      const float *query =
          context.queries + firstQueryRow * shape.queryRowStride + offset;
      for (int dim = 0; dim < headDim; ++dim)
        tile.query[row * headDim + dim] = query[dim] * shape.scale;
    }
    std::memset(tile.accumulator + row * headDim, 0, sizeof(float) * headDim);
  }
  if (byDim) {
    const float *base = context.queries + firstQueryRow * shape.queryRowStride;
    if (offsetsFit) {
      gatherQueriesByDim(base, rowOffsets, tile.rows, headDim, shape.scale,
                         tile.queryByDim);
    } else {
      // Rows past the tile score as zero queries (and are masked out).
      std::fill(tile.queryByDim, tile.queryByDim + headDim * kMaxRows, 0.0f);
      for (int row = 0; row < tile.rows; ++row) {
        int tileRow = item.firstRow + row;
        int64_t token = tileRow / groupSize;
        int head = item.kvHead * groupSize + tileRow % groupSize;
        const float *query =
            base + token * shape.queryRowStride + int64_t(head) * headDim;
        for (int dim = 0; dim < headDim; ++dim)
          tile.queryByDim[dim * kMaxRows + row] = query[dim] * shape.scale;
      }
    }
  }
  const int64_t lastLimit = tile.limit[tile.rows - 1];
  alignas(64) float rotatedKeys[kMaxHeadDim * kMaxBlockSize];
  if constexpr (std::is_same_v<Element, uint16_t>) {
    if (useAmx) {
      runItemAmx(context, item, tile, rotatedKeys, blockCache, blockCacheTags);
      finishItem(context, item, tile, partial, output);
      return;
    }
  }
  alignas(64) float widenedKeys[kMaxHeadDim * 16];
  alignas(64) float widenedValues[kMaxHeadDim * 16];
  for (int32_t page = item.pageBegin; page < item.pageEnd; ++page) {
    int valid = batch.validTokens[page];
    int64_t logicalStart = context.pageStarts[page];
    if (logicalStart > lastLimit)
      break;
    if (valid == 0)
      continue;
    int64_t block = batch.blockIds[page];
    const int64_t offset = block * kv.blockStride + item.kvHead * kv.headStride;
    const Element *keyBlock = static_cast<const Element *>(kv.keys) + offset;
    const Element *valueBlock =
        static_cast<const Element *>(kv.values) + offset;
    if (useAvx512) {
      // Tiles of many rows read each K/V element many times: widen the
      // block to f32 once (two loads per element per tile are cheaper than
      // a conversion per FMA); decode-size tiles convert as they load.
      const bool manyRows = tile.rows > kRowsToWidenBlock;
      const bool widen = !std::is_same_v<Element, float> && manyRows;
      const int64_t blockElements = int64_t(headDim) * 16;
      if (manyRows && blockCache) {
        // The thread's f32 copy of this page for this KV head, made by the
        // first of its tiles that reads the page.
        float *cachedKeys = blockCache + int64_t(page) * 2 * blockElements;
        float *cachedValues = cachedKeys + blockElements;
        if (blockCacheTags[page] != item.kvHead + 1) {
          if (context.options->keyRope)
            rotateKeyBlockAvx512(context, keyBlock, logicalStart, cachedKeys);
          else
            widenBlock(keyBlock, blockElements, cachedKeys);
          widenBlock(valueBlock, int64_t(valid) * headDim, cachedValues);
          blockCacheTags[page] = item.kvHead + 1;
        }
        foldBlockByDim(context, tile, cachedKeys, cachedValues, valid,
                       logicalStart);
        continue;
      }
      const float *keys = nullptr;
      if (context.options->keyRope) {
        rotateKeyBlockAvx512(context, keyBlock, logicalStart, rotatedKeys);
        keys = rotatedKeys;
      } else if (widen) {
        widenBlock(keyBlock, blockElements, widenedKeys);
        keys = widenedKeys;
      }
      if (manyRows) {
        const float *values = nullptr;
        if constexpr (std::is_same_v<Element, float>) {
          if (!keys)
            keys = keyBlock;
          values = valueBlock;
        } else {
          widenBlock(valueBlock, int64_t(valid) * headDim, widenedValues);
          values = widenedValues;
        }
        foldBlockByDim(context, tile, keys, values, valid, logicalStart);
      } else if (keys) {
        foldBlockByRow(context, tile, keys, valueBlock, valid, logicalStart);
      } else {
        foldBlockByRow(context, tile, keyBlock, valueBlock, valid,
                       logicalStart);
      }
    } else if (context.options->keyRope) {
      rotateKeyBlockScalar(context, keyBlock, valid, logicalStart, rotatedKeys);
      foldBlockScalar(context, tile, static_cast<const float *>(rotatedKeys),
                      valueBlock, valid, logicalStart);
    } else {
      foldBlockScalar(context, tile, keyBlock, valueBlock, valid, logicalStart);
    }
  }

  finishItem(context, item, tile, partial, output);
}

/// Combines the split states of one group into its output rows.
void mergeGroup(const CallContext &context, const AttentionWorkItem *splits,
                const float *partials, float *output) {
  const PagedAttentionShape &shape = *context.shape;
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const AttentionWorkItem &first = splits[0];
  const int32_t firstQueryRow = context.batch->queryOffsets[first.sequence];
  const int64_t stateFloats = int64_t(kMaxRows) * (2 + headDim);
  for (int row = 0; row < first.numRows; ++row) {
    float globalMax = kNegativeInfinity;
    for (int split = 0; split < first.numSplits; ++split)
      globalMax = std::max(
          globalMax,
          partials[splits[split].partial * stateFloats + row * (2 + headDim)]);
    int tileRow = first.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = first.kvHead * groupSize + tileRow % groupSize;
    float *out = output + (firstQueryRow + token) * shape.outputRowStride +
                 int64_t(head) * headDim;
    std::fill(out, out + headDim, 0.0f);
    float total = 0;
    for (int split = 0; split < first.numSplits; ++split) {
      const float *state =
          partials + splits[split].partial * stateFloats + row * (2 + headDim);
      if (state[1] == 0)
        continue;
      float weight = std::exp(state[0] - globalMax);
      total += state[1] * weight;
      for (int dim = 0; dim < headDim; ++dim)
        out[dim] += state[2 + dim] * weight;
    }
    float inverse = total > 0 ? 1.0f / total : 0.0f;
    for (int dim = 0; dim < headDim; ++dim)
      out[dim] *= inverse;
  }
}

} // namespace

void pagedAttention(const PagedAttentionShape &shape,
                    const PagedAttentionBatch &batch, const PagedKvView &kv,
                    const float *queries, float *output,
                    const PagedAttentionOptions &options,
                    AttentionWorkspace &workspace) {
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const bool useAvx512 = !options.forceScalar && cpuFeatures().hasAvx512() &&
                         kv.blockSize == 16 && shape.headDim % 16 == 0;
  // A property of the call's shape and storage (and, below, of each
  // sequence's query count): every tile of a sequence takes the same path.
  const bool useAmx = useAvx512 && options.allowAmx &&
                      kv.precision == KvPrecision::F16 &&
                      shape.headDim % 32 == 0 && amxBf16Usable();
  const int minPages =
      options.minPagesPerSplit > 0 ? options.minPagesPerSplit : 8;

  // Logical start of every page: a prefix sum of valid tokens per sequence.
  const int32_t totalPages = batch.pageOffsets[batch.numSequences];
  workspace.pageStarts.resize(size_t(totalPages));
  for (int sequence = 0; sequence < batch.numSequences; ++sequence) {
    int64_t start = 0;
    for (int32_t page = batch.pageOffsets[sequence];
         page < batch.pageOffsets[sequence + 1]; ++page) {
      workspace.pageStarts[size_t(page)] = start;
      start += batch.validTokens[page];
    }
  }

  // Each tile's visible pages are split into ranges (flash-decoding style)
  // by the tile's own length only, never by the batch or the thread count:
  // a sequence's output must not depend on what shares its step, or a
  // cache hit, a bulk and a solo run could round differently and flip a
  // greedy choice.
  constexpr int64_t splitTarget = 16;

  workspace.items.clear();
  workspace.groups.clear();
  int32_t numPartials = 0;
  for (int sequence = 0; sequence < batch.numSequences; ++sequence) {
    const int32_t pageBegin = batch.pageOffsets[sequence];
    const int32_t pageEnd = batch.pageOffsets[sequence + 1];
    if (pageEnd == pageBegin)
      continue;
    const int64_t numQueries =
        batch.queryOffsets[sequence + 1] - batch.queryOffsets[sequence];
    const int64_t length = workspace.pageStarts[size_t(pageEnd - 1)] +
                           batch.validTokens[pageEnd - 1];
    const int64_t rows = numQueries * groupSize;
    for (int kvHead = 0; kvHead < shape.numKvHeads; ++kvHead) {
      for (int64_t firstRow = 0; firstRow < rows; firstRow += kMaxRows) {
        int numRows = int(std::min<int64_t>(kMaxRows, rows - firstRow));
        int64_t lastLimit =
            length - numQueries + (firstRow + numRows - 1) / groupSize;
        int32_t visibleEnd = pageBegin;
        while (visibleEnd < pageEnd &&
               workspace.pageStarts[size_t(visibleEnd)] <= lastLimit)
          ++visibleEnd;
        int64_t visiblePages = visibleEnd - pageBegin;
        int64_t splits = std::max<int64_t>(
            1, std::min<int64_t>(splitTarget, visiblePages / minPages));
        workspace.groups.push_back(int32_t(workspace.items.size()));
        for (int64_t split = 0; split < splits; ++split) {
          AttentionWorkItem item;
          item.sequence = sequence;
          item.kvHead = kvHead;
          item.firstRow = int32_t(firstRow);
          item.numRows = numRows;
          item.pageBegin = int32_t(pageBegin + visiblePages * split / splits);
          item.pageEnd =
              int32_t(pageBegin + visiblePages * (split + 1) / splits);
          item.partial = splits > 1 ? numPartials++ : -1;
          item.numSplits = split == 0 ? int32_t(splits) : 0;
          workspace.items.push_back(item);
        }
      }
    }
  }
  const int64_t stateFloats = int64_t(kMaxRows) * (2 + shape.headDim);
  if (workspace.partials.size() < size_t(numPartials * stateFloats))
    workspace.partials.resize(size_t(numPartials * stateFloats));

  CallContext context{
      &shape, &kv, &options, &batch, workspace.pageStarts.data(), queries};
  const int64_t numItems = int64_t(workspace.items.size());
  float *partials = workspace.partials.data();

  // The per-thread block cache, for rope-in-kernel prefill tiles (rotating
  // a block costs about a tenth of folding it into a 16-row tile; merely
  // widening f16 is cheap enough that the L1-resident per-tile copy wins)
  // while it stays affordable (a big batch's pages would not fit the
  // caches anyway).
  bool anyManyRows = false;
  for (const AttentionWorkItem &item : workspace.items)
    anyManyRows |= item.numRows > kRowsToWidenBlock;
  const int numThreads = numItems > 1 ? omp_get_max_threads() : 1;
  const int64_t entryFloats = int64_t(2) * shape.headDim * 16;
  const int64_t cacheFloats = int64_t(totalPages) * entryFloats;
  // AMX tiles keep packed pairs there, rotated or not.
  const bool useCache = useAvx512 && anyManyRows &&
                        (options.keyRope || useAmx) &&
                        cacheFloats * numThreads <= kMaxBlockCacheFloats;
  if (useCache) {
    // + 16: room to start the entries on a cache line.
    if (workspace.blockCache.size() < size_t(cacheFloats * numThreads + 16))
      workspace.blockCache.resize(size_t(cacheFloats * numThreads + 16));
    workspace.blockCacheTags.assign(size_t(totalPages) * numThreads, 0);
  }
  float *blockCache = nullptr;
  if (useCache) {
    blockCache = workspace.blockCache.data();
    blockCache += (64 - reinterpret_cast<uintptr_t>(blockCache) % 64) % 64 /
                  sizeof(float);
  }
  int32_t *blockCacheTags =
      useCache ? workspace.blockCacheTags.data() : nullptr;
#pragma omp parallel for schedule(dynamic, 1) if (numItems > 1)
  for (int64_t index = 0; index < numItems; ++index) {
    const AttentionWorkItem &item = workspace.items[size_t(index)];
    float *partial =
        item.partial >= 0 ? partials + item.partial * stateFloats : nullptr;
    const int thread = numItems > 1 ? omp_get_thread_num() : 0;
    float *cache = blockCache ? blockCache + thread * cacheFloats : nullptr;
    int32_t *tags =
        blockCache ? blockCacheTags + int64_t(thread) * totalPages : nullptr;
    // Decode steps keep f32 products: packing each block into tiles for
    // one query row would cost more than the products save. The choice
    // depends on the sequence alone.
    const bool decode = batch.decodeSequences
                            ? batch.decodeSequences[item.sequence] != 0
                            : batch.queryOffsets[item.sequence + 1] -
                                      batch.queryOffsets[item.sequence] ==
                                  1;
    const bool itemAmx = useAmx && !decode;
    if (kv.precision == KvPrecision::F16)
      runItem<uint16_t>(context, item, useAvx512, itemAmx, partial, output,
                        cache, tags);
    else
      runItem<float>(context, item, useAvx512, false, partial, output, cache,
                     tags);
  }
  if (numPartials == 0)
    return;
  const int64_t numGroups = int64_t(workspace.groups.size());
#pragma omp parallel for schedule(static)
  for (int64_t group = 0; group < numGroups; ++group) {
    const AttentionWorkItem *first =
        workspace.items.data() + workspace.groups[size_t(group)];
    if (first->numSplits > 1)
      mergeGroup(context, first, partials, output);
  }
}

} // namespace spanc::cpu
