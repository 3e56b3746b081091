//===- AttentionAvx2.cpp - The AVX2 attention page pass -------------------===//
//
// CPUs with AVX2, FMA and F16C but no AVX-512 (AMD before Zen 4, Intel
// client parts and servers before Skylake-SP): blockSize 16, headDim % 8 ==
// 0. Before it such CPUs ran the scalar reference, ~1 GFLOP/s a core
// (docs/ARCHITECTURE.md, "CPU attention"). A page pass widens each page
// from f16 (and, rope-in-kernel, rotates it) once into f32 in L1 and
// folds it into every tile of the pass that sees it; a row's
// scores are two 8-slot vectors, each an FMA chain over the head's dims;
// its softmax runs lane-wise; its P.V is one FMA chain per 8 dims over the
// visible slots in order. Rows are scored four at a time only to share each
// key load: a row's operations, and so its bits, do not depend on the other
// rows of its tile (the executor needs a span hit's short tail to give the
// miss's bits).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>

namespace spanc::cpu::attention {

namespace {

constexpr int kSlots = 16;

SPANC_AVX2 inline float maxLanes(__m256 values) {
  const __m128 fours = _mm_max_ps(_mm256_castps256_ps128(values),
                                  _mm256_extractf128_ps(values, 1));
  const __m128 twos = _mm_max_ps(fours, _mm_movehl_ps(fours, fours));
  return _mm_cvtss_f32(_mm_max_ss(twos, _mm_movehdup_ps(twos)));
}

/// count (a multiple of 8) elements as f32.
template <typename Element>
SPANC_AVX2 void widen(const Element *in, int64_t count, float *out) {
  for (int64_t index = 0; index < count; index += 8)
    _mm256_store_ps(out + index, load8(in + index));
}

/// The block's K for one head as f32 (dimension-major), each slot rotated
/// to its logical index: rotateKeyBlockAvx512's formula on two 8-slot
/// halves, with fused multiply-adds (its bits are this path's own, as every
/// path's are).
template <typename Element>
SPANC_AVX2 void rotateKeyBlock(const CallContext &context,
                               const Element *keyBlock, int64_t logicalStart,
                               float *out) {
  const RopeTable &table = *context.options->keyRope;
  const int headDim = context.shape->headDim;
  const int rotaryDim = table.config().rotaryDim;
  const int half = rotaryDim / 2;
  const RopeOrder order = table.config().order;
  for (int pair = 0; pair < half; ++pair) {
    const auto [first, second] = ropePairDims(order, rotaryDim, pair);
    for (int lane = 0; lane < kSlots; lane += 8) {
      const __m256 c =
          _mm256_loadu_ps(table.cosByPosition(pair) + logicalStart + lane);
      const __m256 s =
          _mm256_loadu_ps(table.sinByPosition(pair) + logicalStart + lane);
      const __m256 a = load8(keyBlock + first * kSlots + lane);
      const __m256 b = load8(keyBlock + second * kSlots + lane);
      _mm256_store_ps(out + first * kSlots + lane,
                      _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_store_ps(out + second * kSlots + lane,
                      _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
  }
  for (int dim = rotaryDim; dim < headDim; ++dim)
    for (int lane = 0; lane < kSlots; lane += 8)
      _mm256_store_ps(out + dim * kSlots + lane,
                      load8(keyBlock + dim * kSlots + lane));
}

/// scores[r][slot] = sum_d query[r][d] * keys[d][slot] for `Rows` rows.
template <int Rows>
SPANC_AVX2 inline void scoreRows(const float *query, int headDim,
                                 const float *keys, float *scores) {
  __m256 low[Rows], high[Rows];
  for (int row = 0; row < Rows; ++row)
    low[row] = high[row] = _mm256_setzero_ps();
  for (int dim = 0; dim < headDim; ++dim) {
    const __m256 keyLow = _mm256_load_ps(keys + dim * kSlots);
    const __m256 keyHigh = _mm256_load_ps(keys + dim * kSlots + 8);
    for (int row = 0; row < Rows; ++row) {
      const __m256 q = _mm256_broadcast_ss(query + row * headDim + dim);
      low[row] = _mm256_fmadd_ps(q, keyLow, low[row]);
      high[row] = _mm256_fmadd_ps(q, keyHigh, high[row]);
    }
  }
  for (int row = 0; row < Rows; ++row) {
    _mm256_store_ps(scores + row * kSlots, low[row]);
    _mm256_store_ps(scores + row * kSlots + 8, high[row]);
  }
}

/// accumulator[0, 64) = accumulator * scale + sum over slots < count of
/// weights[slot] * values[slot][0, 64): eight chains, one per 8 dims, each
/// in slot order (the same chain as the one-vector loop after it). Named,
/// not an array: GCC 12 at -O3 stored an array of sums to the stack in
/// every step of the slot loop.
SPANC_AVX2 inline void accumulate64(float *accumulator, __m256 scale,
                                    const float *values, int headDim,
                                    const float *weights, int count) {
  __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(accumulator), scale);
  __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 8), scale);
  __m256 s2 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 16), scale);
  __m256 s3 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 24), scale);
  __m256 s4 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 32), scale);
  __m256 s5 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 40), scale);
  __m256 s6 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 48), scale);
  __m256 s7 = _mm256_mul_ps(_mm256_loadu_ps(accumulator + 56), scale);
  for (int slot = 0; slot < count; ++slot) {
    const __m256 w = _mm256_broadcast_ss(weights + slot);
    const float *v = values + slot * headDim;
    s0 = _mm256_fmadd_ps(w, _mm256_load_ps(v), s0);
    s1 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 8), s1);
    s2 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 16), s2);
    s3 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 24), s3);
    s4 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 32), s4);
    s5 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 40), s5);
    s6 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 48), s6);
    s7 = _mm256_fmadd_ps(w, _mm256_load_ps(v + 56), s7);
  }
  _mm256_storeu_ps(accumulator, s0);
  _mm256_storeu_ps(accumulator + 8, s1);
  _mm256_storeu_ps(accumulator + 16, s2);
  _mm256_storeu_ps(accumulator + 24, s3);
  _mm256_storeu_ps(accumulator + 32, s4);
  _mm256_storeu_ps(accumulator + 40, s5);
  _mm256_storeu_ps(accumulator + 48, s6);
  _mm256_storeu_ps(accumulator + 56, s7);
}

/// Folds one widened block (keys [dim][slot], values [slot][dim], f32)
/// into the tile's rows that see it.
SPANC_AVX2 void foldBlock(TileState &tile, int headDim, const float *keys,
                          const float *values, int valid,
                          int64_t logicalStart) {
  alignas(32) float scores[kMaxRows * kSlots];
  int counts[kMaxRows];
  const int firstRow = visibleRows(tile, valid, logicalStart, counts);
  for (int row = firstRow; row < tile.rows;) {
    const float *query = tile.query + row * headDim;
    float *out = scores + row * kSlots;
    switch (std::min(4, tile.rows - row)) {
    case 4:
      scoreRows<4>(query, headDim, keys, out);
      row += 4;
      break;
    case 3:
      scoreRows<3>(query, headDim, keys, out);
      row += 3;
      break;
    case 2:
      scoreRows<2>(query, headDim, keys, out);
      row += 2;
      break;
    default:
      scoreRows<1>(query, headDim, keys, out);
      row += 1;
      break;
    }
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 negativeInfinity = _mm256_set1_ps(kNegativeInfinity);
  for (int row = firstRow; row < tile.rows; ++row) {
    const int count = counts[row];
    const __m256 seenLow = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lanes));
    const __m256 seenHigh = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(count - 8), lanes));
    const __m256 low = _mm256_blendv_ps(
        negativeInfinity, _mm256_load_ps(scores + row * kSlots), seenLow);
    const __m256 high = _mm256_blendv_ps(
        negativeInfinity, _mm256_load_ps(scores + row * kSlots + 8), seenHigh);
    const float blockMax = maxLanes(_mm256_max_ps(low, high));
    const float newMax = std::max(tile.maxScore[row], blockMax);
    // exp(0) is exactly 1: most blocks past the first few do not raise a
    // row's finite max, and skip the call (the same bits).
    const bool maxKept = newMax == tile.maxScore[row] && std::isfinite(newMax);
    const float correction =
        maxKept ? 1.0f : std::exp(tile.maxScore[row] - newMax);
    const __m256 shift = _mm256_set1_ps(newMax);
    alignas(32) float weights[kSlots];
    const __m256 weightLow =
        _mm256_and_ps(exp256(_mm256_sub_ps(low, shift)), seenLow);
    const __m256 weightHigh =
        _mm256_and_ps(exp256(_mm256_sub_ps(high, shift)), seenHigh);
    _mm256_store_ps(weights, weightLow);
    _mm256_store_ps(weights + 8, weightHigh);
    tile.sum[row] = tile.sum[row] * correction +
                    sumLanes(_mm256_add_ps(weightLow, weightHigh));
    tile.maxScore[row] = newMax;
    // P.V, 64 dims (8 chains) at a time, then 8 at a time.
    float *accumulator = tile.accumulator + row * headDim;
    const __m256 scale = _mm256_set1_ps(correction);
    int dim = 0;
    for (; dim + 64 <= headDim; dim += 64)
      accumulate64(accumulator + dim, scale, values + dim, headDim, weights,
                   count);
    for (; dim < headDim; dim += 8) {
      __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(accumulator + dim), scale);
      for (int slot = 0; slot < count; ++slot)
        sum =
            _mm256_fmadd_ps(_mm256_broadcast_ss(weights + slot),
                            _mm256_load_ps(values + slot * headDim + dim), sum);
      _mm256_storeu_ps(accumulator + dim, sum);
    }
  }
}

} // namespace

template <typename Element>
SPANC_AVX2 void foldPassAvx2(const CallContext &context,
                             const AttentionWorkItem *const *items,
                             TileState *const *tiles, int count) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = context.shape->headDim;
  const int kvHead = items[0]->kvHead;
  const int32_t pageBegin = items[0]->pageBegin;
  int32_t pageEnd = pageBegin;
  for (int index = 0; index < count; ++index) {
    assert(items[index]->pageBegin == pageBegin &&
           items[index]->kvHead == kvHead && "one pass: one key range");
    pageEnd = std::max(pageEnd, items[index]->pageEnd);
  }
  // A tile sees its range's pages up to its last row's limit (page starts
  // only grow along a sequence), so each folds the pages it folded alone,
  // in the same order, from the same f32 copies: the same bits.
  auto sees = [&](int index, int32_t page) {
    const TileState &tile = *tiles[index];
    return page < items[index]->pageEnd &&
           context.pageStarts[page] <= tile.limit[tile.rows - 1];
  };
  alignas(32) float keys[kernels::kMaxHeadDim * kSlots];
  alignas(32) float values[kernels::kMaxHeadDim * kSlots];
  for (int32_t page = pageBegin; page < pageEnd; ++page) {
    const int valid = batch.validTokens[page];
    bool seen = false;
    for (int index = 0; index < count; ++index)
      seen |= sees(index, page);
    if (!seen || valid == 0)
      continue;
    const int64_t logicalStart = context.pageStarts[page];
    const int64_t offset =
        int64_t(batch.blockIds[page]) * kv.blockStride + kvHead * kv.headStride;
    const Element *keyBlock = static_cast<const Element *>(kv.keys) + offset;
    const Element *valueBlock =
        static_cast<const Element *>(kv.values) + offset;
    if (context.options->keyRope)
      rotateKeyBlock(context, keyBlock, logicalStart, keys);
    else
      widen(keyBlock, int64_t(headDim) * kSlots, keys);
    // Only the valid slots' values: the others may be unwritten memory.
    widen(valueBlock, int64_t(valid) * headDim, values);
    for (int index = 0; index < count; ++index)
      if (sees(index, page))
        foldBlock(*tiles[index], headDim, keys, values, valid, logicalStart);
  }
}

template void foldPassAvx2<float>(const CallContext &,
                                  const AttentionWorkItem *const *,
                                  TileState *const *, int);
template void foldPassAvx2<uint16_t>(const CallContext &,
                                     const AttentionWorkItem *const *,
                                     TileState *const *, int);

} // namespace spanc::cpu::attention
