//===- AttentionAvx512.cpp - The AVX-512 attention tile steps -------------===//
//
// Needs blockSize 16 and headDim % 16 == 0. Prompt rows take two tile
// steps: few-row tiles (foldBlockByRow) score one vector of slots per row;
// larger tiles (foldBlockByDim) hold the 16 rows as vector lanes, so the
// softmax bookkeeping is lane-wise with no horizontal reduction per row.
// Both do the same float operations per row in the same order (test:
// RowResultsDoNotDependOnTheTile), because the executor needs a span-cache
// hit's short tail to give the bits the long prompt gave. Decode rows
// (foldDecodePagesAvx512) fold four pages per softmax step instead: a
// token's few rows score one page at a time as chains of 64 dependent
// FMAs, which wait out the FMA latency, while four pages' chains run side
// by side (attention_bench, a decode over 4 096 keys: 0.12-0.13 -> 0.10-
// 0.11 ms; docs/ARCHITECTURE.md, "CPU attention"). Their P.V runs over
// groups of rows sharing each value load; foldBlockByDim's accumulates the
// transposed output from the weights where the softmax left them.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"

#include "runtime/kernels/cpu/Half.h"

// GCC 12 reports its own _mm512_reduce_* intrinsics (which start from an
// "undefined" vector on purpose) as maybe-uninitialized under -Werror.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <type_traits>

namespace spanc::cpu::attention {

template <typename Element>
SPANC_AVX512 void rotateKeyBlockAvx512(const CallContext &context,
                                       const Element *keyBlock,
                                       int64_t logicalStart, float *out) {
  const RopeTable &table = *context.options->keyRope;
  const int headDim = context.shape->headDim;
  const int rotaryDim = table.config().rotaryDim;
  const int half = rotaryDim / 2;
  const RopeOrder order = table.config().order;
  for (int pair = 0; pair < half; ++pair) {
    const auto [first, second] = ropePairDims(order, rotaryDim, pair);
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

template void rotateKeyBlockAvx512<float>(const CallContext &, const float *,
                                          int64_t, float *);
template void rotateKeyBlockAvx512<uint16_t>(const CallContext &,
                                             const uint16_t *, int64_t,
                                             float *);

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

namespace {

/// count (a multiple of 16) elements as f32.
template <typename Element>
SPANC_AVX512 void widenBlock(const Element *in, int64_t count, float *out) {
  for (int64_t index = 0; index < count; index += 16)
    _mm512_storeu_ps(out + index, load16(in + index));
}

/// Scores of `Rows` query rows against the 16 slots of one block:
/// out[r][slot] = sum_d query[r][d] * key[d][slot].
template <int Rows, typename KeyElement>
SPANC_AVX512 inline void scoreRows(const float *query, int headDim,
                                   const KeyElement *keyBlock, float *out) {
  __m512 accumulators[Rows];
  {
    const __m512 keys = load16(keyBlock);
    for (int row = 0; row < Rows; ++row)
      accumulators[row] =
          _mm512_mul_ps(_mm512_set1_ps(query[row * headDim]), keys);
  }
  for (int dim = 1; dim < headDim; ++dim) {
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

/// P.V for `Rows` consecutive rows over `Chunks` 16-dim chunks from
/// `firstDim`, against the first counts[b] slots of each of `blocks` value
/// blocks in turn: each value vector is loaded once for all rows, and the
/// Rows x Chunks accumulator chains are independent (one row's chunks are
/// too few chains to hide the FMA latency). Row r's weight of slot s of
/// block b is weights[r * rowStep + 16 * b + s]. Every row
/// computes exactly
///   acc = acc * correction; for each block, slot: acc += w * v
/// in that order, so its result does not depend on which rows share the
/// group.
template <int Rows, int Chunks, typename ValueElement>
SPANC_AVX512 inline void
accumulateRows(float *accumulator, int headDim, const float *corrections,
               const float *weights, int rowStep,
               const ValueElement *const *values, const int *counts, int blocks,
               int firstDim) {
  __m512 sums[Rows][Chunks];
  for (int row = 0; row < Rows; ++row) {
    const __m512 scale = _mm512_set1_ps(corrections[row]);
    for (int chunk = 0; chunk < Chunks; ++chunk)
      sums[row][chunk] = _mm512_mul_ps(
          _mm512_loadu_ps(accumulator + row * headDim + chunk * 16), scale);
  }
  for (int block = 0; block < blocks; ++block) {
    const ValueElement *value = values[block] + firstDim;
    const float *blockWeights = weights + block * 16;
    for (int slot = 0; slot < counts[block]; ++slot) {
      __m512 vectors[Chunks];
      for (int chunk = 0; chunk < Chunks; ++chunk)
        vectors[chunk] = load16(value + slot * headDim + chunk * 16);
      for (int row = 0; row < Rows; ++row) {
        const __m512 weight =
            _mm512_set1_ps(blockWeights[row * rowStep + slot]);
        for (int chunk = 0; chunk < Chunks; ++chunk)
          sums[row][chunk] =
              _mm512_fmadd_ps(weight, vectors[chunk], sums[row][chunk]);
      }
    }
  }
  for (int row = 0; row < Rows; ++row)
    for (int chunk = 0; chunk < Chunks; ++chunk)
      _mm512_storeu_ps(accumulator + row * headDim + chunk * 16,
                       sums[row][chunk]);
}

/// accumulateRows over all chunks of the head, four at a time.
template <int Rows, typename ValueElement>
SPANC_AVX512 inline void accumulateRowGroup(float *accumulator, int headDim,
                                            const float *corrections,
                                            const float *weights, int rowStep,
                                            const ValueElement *const *values,
                                            const int *counts, int blocks) {
  const int chunks = headDim / 16;
  int chunk = 0;
  for (; chunk + 4 <= chunks; chunk += 4)
    accumulateRows<Rows, 4>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, values, counts, blocks,
                            chunk * 16);
  switch (chunks - chunk) {
  case 3:
    accumulateRows<Rows, 3>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, values, counts, blocks,
                            chunk * 16);
    break;
  case 2:
    accumulateRows<Rows, 2>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, values, counts, blocks,
                            chunk * 16);
    break;
  case 1:
    accumulateRows<Rows, 1>(accumulator + chunk * 16, headDim, corrections,
                            weights, rowStep, values, counts, blocks,
                            chunk * 16);
    break;
  default:
    break;
  }
}

/// Rows per P.V group: 4 rows x 4 chunks = 16 accumulators, plus the 4
/// shared value vectors and a weight, fit the 32 vector registers.
constexpr int kRowsPerGroup = 4;

/// accumulateRowGroup for `rows` (1 to kRowsPerGroup) rows, dispatched to
/// the instance of that many.
template <typename ValueElement>
SPANC_AVX512 inline void
accumulateGroupOf(int rows, float *accumulator, int headDim,
                  const float *corrections, const float *weights, int rowStep,
                  const ValueElement *const *values, const int *counts,
                  int blocks) {
  static_assert(kRowsPerGroup == 4, "one case per group size");
  switch (rows) {
  case 4:
    accumulateRowGroup<4>(accumulator, headDim, corrections, weights, rowStep,
                          values, counts, blocks);
    break;
  case 3:
    accumulateRowGroup<3>(accumulator, headDim, corrections, weights, rowStep,
                          values, counts, blocks);
    break;
  case 2:
    accumulateRowGroup<2>(accumulator, headDim, corrections, weights, rowStep,
                          values, counts, blocks);
    break;
  default:
    accumulateRowGroup<1>(accumulator, headDim, corrections, weights, rowStep,
                          values, counts, blocks);
    break;
  }
}

/// P.V of rows [firstRow, tile.rows) over runs of rows with the same count
/// (all rows off the diagonal; on it, the heads of one token).
template <typename ValueElement>
SPANC_AVX512 void accumulateTile(TileState &tile, int headDim, int firstRow,
                                 const int *counts, const float *corrections,
                                 const float *weights, int rowStep,
                                 const ValueElement *valueBlock) {
  for (int row = firstRow; row < tile.rows;) {
    int rows = 1;
    while (rows < kRowsPerGroup && row + rows < tile.rows &&
           counts[row + rows] == counts[row])
      ++rows;
    accumulateGroupOf(rows, tile.accumulator + row * headDim, headDim,
                      corrections + row, weights + row * rowStep, rowStep,
                      &valueBlock, counts + row, 1);
    row += rows;
  }
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
  accumulateTile(tile, headDim, firstRow, counts, corrections, weights, 16,
                 valueBlock);
}

/// The AVX-512 tile step for many rows (prefill), with the rows as vector
/// lanes: scores are one vector of 16 rows per key slot (queries
/// dimension-major, each key element broadcast), so the block max, the
/// weights and their sums are lane-wise over rows instead of horizontal
/// reductions per row, and P.V accumulates O^T (tile.accumulatorByDim: a
/// vector of 16 rows per dim) from the weights where they are, each value
/// element broadcast. Each row's operations are exactly foldBlockByRow's:
/// the same FMA chain over dims per score, max (exact in any order), the
/// same exp512 per lane, sumLanes' tree order for the block sum, and
/// accumulateRows' P.V (acc * correction, then w * v + acc for each slot
/// the row sees, in slot order; a lane whose row does not see a slot is
/// left as it is, and a row that sees none of the block has correction 1,
/// or 0 with nothing accumulated); so a row gives the same bits in a
/// decode-size tile as in a full one. Keys and values are f32 (callers
/// widen f16 blocks for tiles this large).
SPANC_AVX512 void foldBlockByDim(const CallContext &context, TileState &tile,
                                 const float *keyBlock, const float *valueBlock,
                                 int valid, int64_t logicalStart) {
  const int headDim = context.shape->headDim;
  alignas(64) int counts[kMaxRows];
  alignas(64) float corrections[kMaxRows];
  const int firstRow = visibleRows(tile, valid, logicalStart, counts);
  if (firstRow == tile.rows)
    return;
  __m512 scores[16];
  {
    // The first dim's products start the chains, as in scoreRows (no
    // array of zeros to clear first).
    const __m512 query = _mm512_load_ps(tile.queryByDim);
    for (int slot = 0; slot < 16; ++slot)
      scores[slot] = _mm512_mul_ps(query, _mm512_set1_ps(keyBlock[slot]));
  }
  for (int dim = 1; dim < headDim; ++dim) {
    const __m512 query = _mm512_load_ps(tile.queryByDim + dim * kMaxRows);
    const float *keys = keyBlock + dim * 16;
    for (int slot = 0; slot < 16; ++slot)
      scores[slot] =
          _mm512_fmadd_ps(query, _mm512_set1_ps(keys[slot]), scores[slot]);
  }
  const __m512i rowCounts =
      _mm512_load_si512(reinterpret_cast<const void *>(counts));
  __m512 blockMax = _mm512_set1_ps(kNegativeInfinity);
  for (int slot = 0; slot < 16; ++slot)
    blockMax = _mm512_mask_max_ps(
        blockMax, _mm512_cmpgt_epi32_mask(rowCounts, _mm512_set1_epi32(slot)),
        blockMax, scores[slot]);
  const __m512 newMax = updateMaxima(tile, firstRow, blockMax, corrections);
  for (int slot = 0; slot < 16; ++slot)
    scores[slot] = _mm512_maskz_mov_ps(
        _mm512_cmpgt_epi32_mask(rowCounts, _mm512_set1_epi32(slot)),
        exp512(_mm512_sub_ps(scores[slot], newMax)));
  {
    __m512 halves[8];
    for (int slot = 0; slot < 8; ++slot)
      halves[slot] = _mm512_add_ps(scores[slot], scores[slot + 8]);
    for (int slot = 0; slot < 4; ++slot)
      halves[slot] = _mm512_add_ps(halves[slot], halves[slot + 4]);
    for (int slot = 0; slot < 2; ++slot)
      halves[slot] = _mm512_add_ps(halves[slot], halves[slot + 2]);
    updateSums(tile, firstRow, corrections,
               _mm512_add_ps(halves[0], halves[1]));
  }
  // Off the diagonal every row sees every valid slot: no masks.
  bool everyRowSeesAll = firstRow == 0;
  for (int row = 0; row < tile.rows; ++row)
    everyRowSeesAll &= counts[row] == valid;
  const __m512 correction = _mm512_load_ps(corrections);
  constexpr int kDims = 8; ///< O^T rows held across the slots
  for (int dim = 0; dim < headDim; dim += kDims) {
    float *out = tile.accumulatorByDim + dim * kMaxRows;
    const float *value = valueBlock + dim;
    __m512 sums[kDims];
    for (int d = 0; d < kDims; ++d)
      sums[d] = _mm512_mul_ps(_mm512_load_ps(out + d * kMaxRows), correction);
    if (everyRowSeesAll) {
      for (int slot = 0; slot < valid; ++slot)
        for (int d = 0; d < kDims; ++d)
          sums[d] = _mm512_fmadd_ps(
              scores[slot], _mm512_set1_ps(value[slot * headDim + d]), sums[d]);
    } else {
      for (int slot = 0; slot < valid; ++slot) {
        const __mmask16 sees =
            _mm512_cmpgt_epi32_mask(rowCounts, _mm512_set1_epi32(slot));
        for (int d = 0; d < kDims; ++d)
          sums[d] = _mm512_mask3_fmadd_ps(
              scores[slot], _mm512_set1_ps(value[slot * headDim + d]), sums[d],
              sees);
      }
    }
    for (int d = 0; d < kDims; ++d)
      _mm512_store_ps(out + d * kMaxRows, sums[d]);
  }
}

/// Scores of `Rows` decode rows against a step's kDecodeStepPages key
/// blocks: out[row][16 * page + slot]. Each score is scoreRows' FMA chain
/// over dims; the Rows x pages chains run side by side (a block at a time,
/// a decode tile's few chains would each wait out the FMA latency).
template <int Rows, typename KeyElement>
SPANC_AVX512 inline void scoreStepRows(const float *query, int headDim,
                                       const KeyElement *const *keyBlocks,
                                       float *out) {
  __m512 accumulators[Rows][kDecodeStepPages];
  for (int row = 0; row < Rows; ++row)
    for (int page = 0; page < kDecodeStepPages; ++page)
      accumulators[row][page] = _mm512_setzero_ps();
  for (int dim = 0; dim < headDim; ++dim) {
    __m512 keys[kDecodeStepPages];
    for (int page = 0; page < kDecodeStepPages; ++page)
      keys[page] = load16(keyBlocks[page] + dim * 16);
    for (int row = 0; row < Rows; ++row) {
      const __m512 element = _mm512_set1_ps(query[row * headDim + dim]);
      for (int page = 0; page < kDecodeStepPages; ++page)
        accumulators[row][page] =
            _mm512_fmadd_ps(element, keys[page], accumulators[row][page]);
    }
  }
  for (int row = 0; row < Rows; ++row)
    for (int page = 0; page < kDecodeStepPages; ++page)
      _mm512_storeu_ps(out + row * 16 * kDecodeStepPages + page * 16,
                       accumulators[row][page]);
}

/// One online-softmax step of a decode tile over up to kDecodeStepPages
/// pages (an absent one has valid 0 and any readable key block): one max,
/// one correction and one sum per row for the step's keys. A row's
/// arithmetic is its own (its limit decides its masks; P.V walks each
/// page's valid slots, adding exact zeros for the ones it does not see).
template <typename KeyElement, typename ValueElement>
SPANC_AVX512 void foldDecodeStep(const CallContext &context, TileState &tile,
                                 const KeyElement *const *keyBlocks,
                                 const ValueElement *const *valueBlocks,
                                 const int *valid, const int64_t *starts) {
  constexpr int kStepSlots = 16 * kDecodeStepPages;
  const int headDim = context.shape->headDim;
  alignas(64) float scores[kMaxRows * kStepSlots];
  alignas(64) float weights[kMaxRows * kStepSlots];
  alignas(64) float blockMax[kMaxRows];
  alignas(64) float corrections[kMaxRows];
  alignas(64) float blockSums[kMaxRows] = {};
  alignas(64) float newMax[kMaxRows];
  __mmask16 sees[kMaxRows][kDecodeStepPages];
  for (int row = 0; row < tile.rows; row += 4) {
    const float *query = tile.query + row * headDim;
    float *out = scores + row * kStepSlots;
    switch (std::min(4, tile.rows - row)) {
    case 4:
      scoreStepRows<4>(query, headDim, keyBlocks, out);
      break;
    case 3:
      scoreStepRows<3>(query, headDim, keyBlocks, out);
      break;
    case 2:
      scoreStepRows<2>(query, headDim, keyBlocks, out);
      break;
    default:
      scoreStepRows<1>(query, headDim, keyBlocks, out);
      break;
    }
  }
  const __m512 negativeInfinity = _mm512_set1_ps(kNegativeInfinity);
  for (int row = 0; row < kMaxRows; ++row)
    blockMax[row] = kNegativeInfinity;
  for (int row = 0; row < tile.rows; ++row) {
    __m512 max = negativeInfinity;
    for (int page = 0; page < kDecodeStepPages; ++page) {
      const int64_t count = std::clamp<int64_t>(
          std::min<int64_t>(valid[page], tile.limit[row] - starts[page] + 1), 0,
          16);
      sees[row][page] = __mmask16((1u << count) - 1);
      max = _mm512_max_ps(
          max, _mm512_mask_loadu_ps(negativeInfinity, sees[row][page],
                                    scores + row * kStepSlots + page * 16));
    }
    blockMax[row] = _mm512_reduce_max_ps(max);
  }
  _mm512_store_ps(newMax,
                  updateMaxima(tile, 0, _mm512_load_ps(blockMax), corrections));
  for (int row = 0; row < tile.rows; ++row) {
    __m512 pageWeights[kDecodeStepPages];
    for (int page = 0; page < kDecodeStepPages; ++page) {
      const __mmask16 mask = sees[row][page];
      const float *rowScores = scores + row * kStepSlots + page * 16;
      pageWeights[page] = _mm512_maskz_mov_ps(
          mask, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, rowScores),
                                     _mm512_set1_ps(newMax[row]))));
      _mm512_store_ps(weights + row * kStepSlots + page * 16,
                      pageWeights[page]);
    }
    static_assert(kDecodeStepPages == 4, "the step sum adds four pages");
    blockSums[row] =
        sumLanes(_mm512_add_ps(_mm512_add_ps(pageWeights[0], pageWeights[1]),
                               _mm512_add_ps(pageWeights[2], pageWeights[3])));
  }
  updateSums(tile, 0, corrections, _mm512_load_ps(blockSums));
  for (int row = 0; row < tile.rows; row += kRowsPerGroup)
    accumulateGroupOf(std::min(kRowsPerGroup, tile.rows - row),
                      tile.accumulator + row * headDim, headDim,
                      corrections + row, weights + row * kStepSlots, kStepSlots,
                      valueBlocks, valid, kDecodeStepPages);
}

} // namespace

/// One page of a page pass as its tiles read it: the stored K and V
/// blocks, and their f32 copies (K rotated with rope-in-kernel) where made
/// (null: none).
template <typename Element> struct PassPage {
  const Element *keyBlock, *valueBlock;
  const float *keys, *values;
  int valid;
  int64_t logicalStart;
};

/// Folds `page` into `tile`: block by dim for many rows (f32 K and V, the
/// copies or f32 storage), block by row for decode-size tiles.
template <typename Element>
SPANC_AVX512 void foldPassPage(const CallContext &context, TileState &tile,
                               const PassPage<Element> &page) {
  if (tile.rows > kRowsToWidenBlock) {
    if constexpr (std::is_same_v<Element, float>)
      foldBlockByDim(context, tile, page.keys ? page.keys : page.keyBlock,
                     page.values ? page.values : page.valueBlock, page.valid,
                     page.logicalStart);
    else
      foldBlockByDim(context, tile, page.keys, page.values, page.valid,
                     page.logicalStart);
  } else if (page.keys && page.values) {
    foldBlockByRow(context, tile, page.keys, page.values, page.valid,
                   page.logicalStart);
  } else if (page.keys) {
    foldBlockByRow(context, tile, page.keys, page.valueBlock, page.valid,
                   page.logicalStart);
  } else {
    foldBlockByRow(context, tile, page.keyBlock, page.valueBlock, page.valid,
                   page.logicalStart);
  }
}

template <typename Element>
void foldPassAvx512(const CallContext &context,
                    const AttentionWorkItem *const *items,
                    TileState *const *tiles, int count, float *blockCache,
                    int32_t *blockCacheTags) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = context.shape->headDim;
  const int kvHead = items[0]->kvHead;
  const int32_t pageBegin = items[0]->pageBegin;
  const int64_t blockElements = int64_t(headDim) * 16;
  const bool rope = context.options->keyRope != nullptr;
  int32_t pageEnd = pageBegin;
  bool anyManyRows = false;
  for (int index = 0; index < count; ++index) {
    assert(items[index]->pageBegin == pageBegin &&
           items[index]->kvHead == kvHead && "one pass: one key range");
    pageEnd = std::max(pageEnd, items[index]->pageEnd);
    anyManyRows |= tiles[index]->rows > kRowsToWidenBlock;
  }
  auto stored = [&](int32_t page) {
    const int64_t offset =
        int64_t(batch.blockIds[page]) * kv.blockStride + kvHead * kv.headStride;
    return PassPage<Element>{static_cast<const Element *>(kv.keys) + offset,
                             static_cast<const Element *>(kv.values) + offset,
                             nullptr,
                             nullptr,
                             batch.validTokens[page],
                             context.pageStarts[page]};
  };
  auto sees = [&](int index, int32_t page) {
    const TileState &tile = *tiles[index];
    return page < items[index]->pageEnd &&
           context.pageStarts[page] <= tile.limit[tile.rows - 1];
  };

  if (blockCache) {
    // The thread's f32 copies of the pages for this KV head, made by the
    // first of its passes that reads each page and kept for its later
    // ones (a long prompt's key range has many passes): tile by tile, each
    // tile streaming the range's copies with its own state in L1.
    for (int index = 0; index < count; ++index)
      for (int32_t page = pageBegin; page < pageEnd && sees(index, page);
           ++page) {
        PassPage<Element> view = stored(page);
        if (view.valid == 0)
          continue;
        float *cachedKeys = blockCache + int64_t(page) * 2 * blockElements;
        float *cachedValues = cachedKeys + blockElements;
        if (blockCacheTags[page] != kvHead + 1) {
          if (rope)
            rotateKeyBlockAvx512(context, view.keyBlock, view.logicalStart,
                                 cachedKeys);
          else
            widenBlock(view.keyBlock, blockElements, cachedKeys);
          widenBlock(view.valueBlock, int64_t(view.valid) * headDim,
                     cachedValues);
          blockCacheTags[page] = kvHead + 1;
        }
        view.keys = cachedKeys, view.values = cachedValues;
        foldPassPage(context, *tiles[index], view);
      }
  } else {
    // Page by page: each page read, rotated and widened once, into L1,
    // then folded into every tile that sees it (docs/ARCHITECTURE.md,
    // "CPU attention": a hit's few tiles no longer stream a cached chunk
    // back from L3, nor rotated-K tiles widen each page themselves).
    // Tiles of many rows read each K/V element many times, so the page is
    // widened to f32 for them (two loads per element per tile are cheaper
    // than a conversion per FMA); a pass of decode-size tiles alone
    // converts as it loads.
    const bool widen = anyManyRows && !std::is_same_v<Element, float>;
    alignas(64) float pageKeys[kernels::kMaxHeadDim * 16];
    alignas(64) float pageValues[kernels::kMaxHeadDim * 16];
    for (int32_t page = pageBegin; page < pageEnd; ++page) {
      bool seen = false;
      for (int index = 0; index < count; ++index)
        seen |= sees(index, page);
      PassPage<Element> view = stored(page);
      if (!seen || view.valid == 0)
        continue;
      if (rope) {
        rotateKeyBlockAvx512(context, view.keyBlock, view.logicalStart,
                             pageKeys);
        view.keys = pageKeys;
      } else if (widen) {
        widenBlock(view.keyBlock, blockElements, pageKeys);
        view.keys = pageKeys;
      }
      if (widen) {
        widenBlock(view.valueBlock, int64_t(view.valid) * headDim, pageValues);
        view.values = pageValues;
      }
      for (int index = 0; index < count; ++index)
        if (sees(index, page))
          foldPassPage(context, *tiles[index], view);
    }
  }
  for (int index = 0; index < count; ++index) {
    TileState &tile = *tiles[index];
    if (tile.rows > kRowsToWidenBlock) // foldBlockByDim's O^T, back to rows
      for (int row = 0; row < tile.rows; ++row)
        for (int dim = 0; dim < headDim; ++dim)
          tile.accumulator[row * headDim + dim] =
              tile.accumulatorByDim[dim * kMaxRows + row];
  }
}

template void foldPassAvx512<float>(const CallContext &,
                                    const AttentionWorkItem *const *,
                                    TileState *const *, int, float *,
                                    int32_t *);
template void foldPassAvx512<uint16_t>(const CallContext &,
                                       const AttentionWorkItem *const *,
                                       TileState *const *, int, float *,
                                       int32_t *);

template <typename Element>
void foldDecodePagesAvx512(const CallContext &context,
                           const AttentionWorkItem &item, TileState &tile) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  int64_t lastLimit = tile.limit[0];
  for (int row = 1; row < tile.rows; ++row)
    lastLimit = std::max(lastLimit, tile.limit[row]);
  const bool rotate = context.options->keyRope != nullptr;
  alignas(64) float rotatedKeys[kDecodeStepPages][kernels::kMaxHeadDim * 16];
  const Element *keyBlocks[kDecodeStepPages];
  const float *rotatedBlocks[kDecodeStepPages] = {};
  const Element *valueBlocks[kDecodeStepPages];
  int valid[kDecodeStepPages];
  int64_t starts[kDecodeStepPages];
  int32_t page = item.pageBegin;
  while (true) {
    // The step: the next kDecodeStepPages pages with keys the rows see.
    int pages = 0;
    for (; page < item.pageEnd && pages < kDecodeStepPages; ++page) {
      const int64_t logicalStart = context.pageStarts[page];
      if (logicalStart > lastLimit)
        break;
      if (batch.validTokens[page] == 0)
        continue;
      const int64_t offset = int64_t(batch.blockIds[page]) * kv.blockStride +
                             item.kvHead * kv.headStride;
      keyBlocks[pages] = static_cast<const Element *>(kv.keys) + offset;
      valueBlocks[pages] = static_cast<const Element *>(kv.values) + offset;
      valid[pages] = batch.validTokens[page];
      starts[pages] = logicalStart;
      if (rotate) {
        rotateKeyBlockAvx512(context, keyBlocks[pages], logicalStart,
                             rotatedKeys[pages]);
        rotatedBlocks[pages] = rotatedKeys[pages];
      }
      ++pages;
    }
    if (pages == 0)
      return;
    // Absent pages score the first page's keys, all masked.
    for (int absent = pages; absent < kDecodeStepPages; ++absent) {
      keyBlocks[absent] = keyBlocks[0];
      rotatedBlocks[absent] = rotatedBlocks[0];
      valueBlocks[absent] = valueBlocks[0];
      valid[absent] = 0;
      starts[absent] = starts[0];
    }
    if (rotate)
      foldDecodeStep(context, tile, rotatedBlocks, valueBlocks, valid, starts);
    else
      foldDecodeStep(context, tile, keyBlocks, valueBlocks, valid, starts);
  }
}

template void foldDecodePagesAvx512<float>(const CallContext &,
                                           const AttentionWorkItem &,
                                           TileState &);
template void foldDecodePagesAvx512<uint16_t>(const CallContext &,
                                              const AttentionWorkItem &,
                                              TileState &);

} // namespace spanc::cpu::attention
