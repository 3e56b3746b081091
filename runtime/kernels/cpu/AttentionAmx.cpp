//===- AttentionAmx.cpp - The AMX attention tile step ---------------------===//
//
// The AMX path (f16 K/V, CPUs with AMX, head dim % 32 == 0 and <= 128).
// The tile's 16 query rows live in the 16 lanes of a vector: everything is
// computed transposed, so the online softmax is elementwise across rows
// (no per-row reduction, no per-row mask loop) and a row's bits depend on
// its own lane alone. Pages are folded four at a time (a step: 64 keys;
// pages pageBegin + 4i .. + 4i + 3 of the item, so a page's place in its
// step never depends on which rows a tile holds):
//   S^T[key][row] = K[key] . Q[row] on AMX: K as A tiles (16 slots x 32
//     dims, bf16 high and low parts), Q^T as B tiles (dimension pairs x
//     rows, scaled by log2 e so that the weights are powers of two),
//     Kh.Qh + Kl.Qh + Kh.Ql with f32 sums (scores to ~16 bits, where bf16
//     alone would move the softmax weights by percents);
//   the online softmax over the step's keys, one vector per key: the
//     step's max per lane, the correction 2^(old - new) of the lane's
//     reference (below), weights (1 + 2^-8) 2^(s - reference) (masked keys
//     exactly zero) truncated to bf16 as a B tile of key pairs ([P ; P]),
//     as flash attention on GPUs feeds P to its P.V products (a weight
//     moves by at most ~2^-8 of itself, the common factor cancels in the
//     normalization, and its polynomial needs no more precision than that;
//     the error enters the output linearly, where the scores' would be
//     exponentiated), and the row sums of exactly the weights P.V uses
//     (VDPBF16PS with ones);
//   O^T[dim][row] += V^T . P^T on AMX: per page and 16 dims an A tile
//     [Vh | Vl] (f16 V splits exactly) times [P ; P]: Vh.P + Vl.P in one
//     product, accumulated into O^T tiles kept in memory; O^T is
//     multiplied by the corrections only in a step where some lane's
//     reference moved (a lane whose reference did not move has correction
//     exactly 1, so its bits are the same either way). A lane's reference
//     is not its running max: it moves to the step's max only when that
//     passes it by more than kMaxLead (8, in log2 units), so weights run up
//     to 2^8 (as exact in bf16 and f32 as weights up to 1) and a tile of
//     16 rows rescales at a few steps instead of at every step where one
//     of its rows finds a larger score.
// The tile unit holds a vector port while it multiplies (on Sapphire
// Rapids a 16-cycle product halves the vector throughput beside it), so
// products and vector instructions both count: P in bf16 halved the P.V
// products and dropped a third of the weights' instructions.
// The steps run as a software pipeline at the grain of a page (step i's
// weights between step i + 1's score products, step i's P.V between the
// max passes over step i + 1's scores), so that the tile unit and the
// vector units work side by side: either phase alone is a longer run of
// one kind of instruction than the out-of-order window bridges. An absent
// page (past the item or every row's limit) adds exact zeros at the place
// a masked one would, so a row's bits do not depend on the other rows of
// its tile. A page pass (foldTilesAmx) walks the pages of several tiles
// of one KV head together: each step's pages are packed once (per thread
// and page through the block cache, or into one of two step buffers in a
// call without one) and fed to every tile that sees them, each tile with
// its own pipeline (TileFold). Measured figures:
// bench/kv/AttentionBench.cpp, docs/ARCHITECTURE.md ("CPU attention").
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"

// GCC 12 reports its own _mm512_reduce_* intrinsics (which start from an
// "undefined" vector on purpose) as maybe-uninitialized under -Werror.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

namespace spanc::cpu::attention {

namespace {

constexpr int kStepPages = 4;
/// How far (log2 units) a step's max may pass a lane's reference before
/// the reference moves to it: weights stay below 2^kMaxLead.
constexpr float kMaxLead = 8;
/// How many steps ahead a pass prefetches its pages' K and V blocks.
constexpr int kPrefetchSteps = 1;
/// One AMX tile: 16 rows of 64 bytes (32 bf16 or 16 f32).
constexpr int kTileHalves = 16 * 32;
/// bf16 values of one page's packed K (or V) for head dim D: D * 32.
constexpr int kMaxPageHalves = kMaxAmxHeadDim * 32;

/// Tiles, 16 rows of 64 bytes each. Scores: 0-3 the step's pages, 4 and 5
/// a page's K high and low parts, 6 and 7 the queries' high and low
/// parts. P.V: 0-3 the O^T chunks of a group, 4 a page's [P ; P], 6 and 7
/// value tiles (two, so that a load need not wait for the previous
/// product).
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

/// 16 lanes of (even, odd) bf16 pairs, the high parts of two vectors of
/// f32: lane i = even[i] in its low half, odd[i] in its high half (AMX's
/// pair order), and the same for what rounding left out (the low parts).
struct SplitPairs {
  __m512i high, low;
};

/// The f32 values of a pair vector's even and odd halves.
SPANC_AVX512BF16 inline __m512 evenValues(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
}
SPANC_AVX512BF16 inline __m512 oddValues(__m512i pairs) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(pairs, _mm512_set1_epi32(int32_t(0xffff0000u))));
}

/// even and odd split into bf16 high parts and low parts (the rest,
/// rounded): hi + lo carries ~16 significant bits, and f16 exactly.
SPANC_AVX512BF16 inline SplitPairs splitPairs(__m512 even, __m512 odd) {
  const __m512i high = interleaveBf16Pairs(even, odd);
  const __m512i low = interleaveBf16Pairs(_mm512_sub_ps(even, evenValues(high)),
                                          _mm512_sub_ps(odd, oddValues(high)));
  return {high, low};
}

SPANC_AVX512BF16 inline void storeTile(const __m512i (&rows)[16],
                                       uint16_t *out) {
  for (int row = 0; row < 16; ++row)
    _mm512_store_si512(out + row * 32, rows[row]);
}

/// K of one block ([dim][16 slots]) as A tiles, per 32 dims a high-part
/// tile then a low-part tile, each 16 slots x 16 dimension pairs.
template <typename Element>
SPANC_AVX512BF16 void packKeyTiles(const Element *keysByDim, int headDim,
                                   uint16_t *out) {
  for (int chunk = 0; chunk < headDim / 32; ++chunk) {
    __m512i high[16], low[16];
    for (int pair = 0; pair < 16; ++pair) {
      const int dim = chunk * 32 + 2 * pair;
      const SplitPairs split = splitPairs(load16(keysByDim + dim * 16),
                                          load16(keysByDim + (dim + 1) * 16));
      high[pair] = split.high;
      low[pair] = split.low;
    }
    transpose16(high);
    transpose16(low);
    storeTile(high, out + chunk * 2 * kTileHalves);
    storeTile(low, out + chunk * 2 * kTileHalves + kTileHalves);
  }
}

/// V of one block ([slot][headDim]) as A tiles, per 16 dims one tile of
/// 16 dims x [8 slot pairs of high parts | 8 of low parts]; slots past
/// `valid` are zeros (their memory may hold anything, and a zero weight
/// times a NaN is a NaN).
template <typename Element>
SPANC_AVX512BF16 void packValueTiles(const Element *values, int valid,
                                     int headDim, uint16_t *out) {
  const __m512 zero = _mm512_setzero_ps();
  for (int chunk = 0; chunk < headDim / 16; ++chunk) {
    __m512i columns[16];
    for (int pair = 0; pair < 8; ++pair) {
      const int even = 2 * pair, odd = 2 * pair + 1;
      const SplitPairs split = splitPairs(
          even < valid ? load16(values + even * headDim + chunk * 16) : zero,
          odd < valid ? load16(values + odd * headDim + chunk * 16) : zero);
      columns[pair] = split.high;
      columns[8 + pair] = split.low;
    }
    transpose16(columns);
    storeTile(columns, out + chunk * kTileHalves);
  }
}

/// The tile's scaled queries as B tiles: per 32 dims a high-part tile then
/// a low-part tile, each 16 dimension pairs x 16 rows (rows past the tile
/// zero queries: they score zero everywhere and are never written).
SPANC_AVX512BF16 void packQueryTiles(const AmxTileRows &tile, int headDim,
                                     uint16_t *out) {
  const __m512 scale = _mm512_set1_ps(tile.scale);
  // Scores in log2 units: the weights are then powers of two.
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  for (int chunk = 0; chunk < headDim / 32; ++chunk) {
    __m512i high[16], low[16];
    for (int row = 0; row < 16; ++row) {
      const bool inside = row < tile.rows;
      const float *query = inside ? tile.query[row] + chunk * 32 : nullptr;
      // (q * scale) * log2 e: the scaled query rounds as the other paths'.
      const __m512 first =
          inside ? _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(query), scale),
                                 log2e)
                 : _mm512_setzero_ps();
      const __m512 second =
          inside ? _mm512_mul_ps(
                       _mm512_mul_ps(_mm512_loadu_ps(query + 16), scale), log2e)
                 : _mm512_setzero_ps();
      // Consecutive dims pair up: bf16 of dims 0..31 in order.
      high[row] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(second, first));
      const __m512 firstHigh = _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm512_castsi512_si256(high[row])), 16));
      const __m512 secondHigh = _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(high[row], 1)), 16));
      low[row] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(
          _mm512_sub_ps(second, secondHigh), _mm512_sub_ps(first, firstHigh)));
    }
    transpose16(high);
    transpose16(low);
    storeTile(high, out + chunk * 2 * kTileHalves);
    storeTile(low, out + chunk * 2 * kTileHalves + kTileHalves);
  }
}

/// 2^x for x <= 0 (the correction 2^(old max - new max), the scores being
/// in log2 units): x = n + r with |r| <= 1/2, 2^r = e^(r ln 2) by its
/// degree-6 Taylor polynomial (relative error ~1e-7: the correction scales
/// every weight folded before it, so it keeps f32's precision), scaled by
/// 2^n. Below -126 (the smallest normal f32) it clamps, as exp512
/// does at -87.
SPANC_AVX512 inline __m512 softmaxExp2(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n =
      _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f); // ln2^6 / 6!
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// (1 + 2^-8) 2^x for x <= kMaxLead to the precision of a bf16 weight that
/// pageWeights truncates: x = n + r with n = floor(x) and r in [0, 1) in
/// one VREDUCEPS, 2^r by a degree-3 polynomial fitted to it there
/// (relative error 8.6e-5, against bf16's spacing of up to 2^-7), its
/// coefficients scaled by 1 + 2^-8 so that truncating to bf16 moves a
/// weight by at most ~2^-8 of it either way, as rounding would (the common
/// factor cancels in the normalization; 1 + 2^-8 truncates to exactly 1,
/// the reference's weight), and VSCALEFPS, which scales by 2^floor(x) reading x
/// itself. Below -126 the result is an f32 denormal or zero, which the
/// truncation makes zero or a denormal weight. The correction keeps
/// softmaxExp2: it scales every weight before.
SPANC_AVX512 inline __m512 weightExp2(__m512 x) {
  const __m512 r =
      _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  constexpr float kCentre = 1.0f + 0x1p-8f;
  __m512 p = _mm512_set1_ps(7.706629484891891e-2f * kCentre);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.2764579951763153e-1f * kCentre));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.951165795326233e-1f * kCentre));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kCentre));
  return _mm512_scalef_ps(p, x);
}

/// 16 lanes of (even, odd) weight pairs in bf16, truncated: odd's high
/// half over even's, one shift and one bitwise select (rounding with
/// VCVTNE2PS2BF16 and putting the pairs in order with VPERMW took three
/// instructions, two of them on the port a tile product holds).
SPANC_AVX512 inline __m512i truncatedBf16Pairs(__m512 even, __m512 odd) {
  return _mm512_ternarylogic_epi32(
      _mm512_castps_si512(odd),
      _mm512_srli_epi32(_mm512_castps_si512(even), 16),
      _mm512_set1_epi32(int32_t(0xffff0000u)), 0xe4); // c ? a : b
}

/// One page of a step as the tile step reads it: packed K and V tiles, or
/// absent (keys null).
struct StepPage {
  const uint16_t *keys = nullptr;
  const uint16_t *values = nullptr;
  int valid = 0;
  /// Its first slot's logical index minus the item's first page's.
  int32_t offset = 0;
  /// Every row of the tile sees all 16 slots (no mask).
  bool whole = false;
};

/// A step's pages, copied as one value (a plain array went through a
/// memmove call per tile and step).
using StepPages = std::array<StepPage, kStepPages>;

/// The running state of the tile, transposed: lane = row.
struct LaneState {
  /// Each lane's reference (the largest score seen, or up to kMaxLead
  /// below it: weighed against it, the row's weights sum to `sum`).
  __m512 max, sum;
  /// Each row's last visible logical index minus the item's first page's
  /// (rows past the tile see everything).
  __m512i limit;
  /// O^T: [dim][16 rows].
  alignas(64) float accumulator[kMaxAmxHeadDim * 16];
};

#define SPANC_AMX_STEP                                                         \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,"         \
                        "avx512dq,avx512bf16")))

// The tile intrinsics take their tile numbers as literals (they name
// registers in inline assembly), so a slot chosen at run time is
// dispatched here once: OP(tile, valueTile) with slot 0-3 as the tile and 6
// or 7 by its parity as the value tile (P.V loads a page's value tiles
// alternately, so that a load need not wait for the previous product).
#define SPANC_ON_SLOT(slot, OP)                                                \
  do {                                                                         \
    switch (slot) {                                                            \
    case 0:                                                                    \
      OP(0, 6);                                                                \
      break;                                                                   \
    case 1:                                                                    \
      OP(1, 7);                                                                \
      break;                                                                   \
    case 2:                                                                    \
      OP(2, 6);                                                                \
      break;                                                                   \
    default:                                                                   \
      OP(3, 7);                                                                \
      break;                                                                   \
    }                                                                          \
  } while (false)

/// Scores of page `slot` for one 32-dim chunk into tile `slot`: K in tiles
/// 4 and 5, Q in 6 and 7.
#define SPANC_SCORE_CHUNK(Slot, Unused)                                        \
  _tile_loadd(4, keys, 64);                                                    \
  _tile_loadd(5, keys + kTileHalves, 64);                                      \
  _tile_dpbf16ps(Slot, 4, 6);                                                  \
  _tile_dpbf16ps(Slot, 5, 6);                                                  \
  _tile_dpbf16ps(Slot, 4, 7)
SPANC_AMX_STEP inline void dispatchScoreChunk(int slot, const uint16_t *keys) {
  SPANC_ON_SLOT(slot, SPANC_SCORE_CHUNK);
}

/// P.V of one page into the O^T chunk held in tile `slot`: its value tile
/// [Vh | Vl] times [P ; P] (4).
#define SPANC_ACCUMULATE_VALUES(Slot, ValueTile)                               \
  _tile_loadd(ValueTile, values, 64);                                          \
  _tile_dpbf16ps(Slot, ValueTile, 4)
SPANC_AMX_STEP inline void dispatchAccumulate(int slot,
                                              const uint16_t *values) {
  SPANC_ON_SLOT(slot, SPANC_ACCUMULATE_VALUES);
}

#define SPANC_LOAD_SLOT(Slot, Unused) _tile_loadd(Slot, from, 64)
SPANC_AMX_STEP inline void loadSlot(int slot, const float *from) {
  SPANC_ON_SLOT(slot, SPANC_LOAD_SLOT);
}

#define SPANC_STORE_SLOT(Slot, Unused) _tile_stored(Slot, to, 64)
SPANC_AMX_STEP inline void storeSlot(int slot, float *to) {
  SPANC_ON_SLOT(slot, SPANC_STORE_SLOT);
}

#define SPANC_ZERO_SLOT(Slot, Unused) _tile_zero(Slot)
SPANC_AMX_STEP inline void zeroSlot(int slot) {
  SPANC_ON_SLOT(slot, SPANC_ZERO_SLOT);
}

/// The weight tile of one page: [P ; P], the 8 key pairs twice (the value
/// tile's rows are [Vh | Vl]).
struct WeightTile {
  alignas(64) uint16_t doubled[kTileHalves];
};

/// The scores of one page into tile `slot` (S^T, 16 slots x 16 rows): per
/// 32-dim chunk its K tiles into 4 and 5, the queries' into 6 and 7.
SPANC_AMX_STEP inline void scorePage(int slot, int headDim,
                                     const uint16_t *queries,
                                     const uint16_t *keys) {
  zeroSlot(slot);
  for (int chunk = 0; chunk < headDim / 32; ++chunk) {
    _tile_loadd(6, queries + chunk * 2 * kTileHalves, 64);
    _tile_loadd(7, queries + chunk * 2 * kTileHalves + kTileHalves, 64);
    dispatchScoreChunk(slot, keys + chunk * 2 * kTileHalves);
  }
}

/// The max per lane of one page's scores, masked keys -inf; a page some
/// row does not wholly see records each key's visible lanes.
SPANC_AMX_STEP inline __m512 pageMax(const StepPage &page, const float *scores,
                                     __m512i limits, __mmask16 *visible) {
  const __m512 negativeInfinity =
      _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 max = negativeInfinity;
  if (page.whole) {
    for (int key = 0; key < 16; ++key)
      max = _mm512_max_ps(max, _mm512_load_ps(scores + key * 16));
    return max;
  }
  const __m512i limit =
      _mm512_sub_epi32(limits, _mm512_set1_epi32(page.offset));
  for (int key = 0; key < 16; ++key) {
    const __mmask16 mask =
        key < page.valid
            ? _mm512_cmpge_epi32_mask(limit, _mm512_set1_epi32(key))
            : __mmask16(0);
    visible[key] = mask;
    max = _mm512_max_ps(
        max, _mm512_mask_load_ps(negativeInfinity, mask, scores + key * 16));
  }
  return max;
}

/// One page's weights 2^(s - subtract) (masked keys exactly zero) in bf16
/// as a B tile of key pairs, and their sums as P.V will use them
/// (VDPBF16PS of each lane's pair with ones).
SPANC_AMX_STEP inline void pageWeights(const StepPage &page,
                                       const float *scores, __m512 subtract,
                                       const __mmask16 *visible,
                                       WeightTile &tile, __m512 &sum) {
  const __m512bh ones =
      reinterpret_cast<__m512bh>(_mm512_set1_epi16(int16_t(0x3f80)));
  for (int pair = 0; pair < 8; ++pair) {
    const int even = 2 * pair, odd = even + 1;
    __m512 evenWeight =
        weightExp2(_mm512_sub_ps(_mm512_load_ps(scores + even * 16), subtract));
    __m512 oddWeight =
        weightExp2(_mm512_sub_ps(_mm512_load_ps(scores + odd * 16), subtract));
    if (!page.whole) {
      evenWeight = _mm512_maskz_mov_ps(visible[even], evenWeight);
      oddWeight = _mm512_maskz_mov_ps(visible[odd], oddWeight);
    }
    const __m512i pairs = truncatedBf16Pairs(evenWeight, oddWeight);
    _mm512_store_si512(tile.doubled + pair * 32, pairs);
    _mm512_store_si512(tile.doubled + (8 + pair) * 32, pairs);
    sum = _mm512_dpbf16_ps(sum, reinterpret_cast<__m512bh>(pairs), ones);
  }
}

/// A step's pages, their scores and the per-key visibility of the pages
/// some row does not wholly see.
struct Step {
  StepPages pages;
  alignas(64) float scores[kStepPages][16 * 16];
  __mmask16 visible[kStepPages][16];
  __m512 max; ///< the step's max per lane
};

/// One tile's fold over the steps of its item: its packed queries, its
/// running state and the two steps in flight (the one being folded, the
/// one being scored). The steps a tile is fed are a prefix of its pass's
/// steps (foldTilesAmx below), so the pass packs each page once for all of
/// its tiles; the arithmetic of each row is the same whatever tiles share
/// its pass. A step's fold is two halves (weigh, then accumulate) that the
/// pass runs over all of its tiles in turn: between a tile's halves the
/// other tiles' work runs while its weights' stores reach the cache for
/// the tile loads that read them, and its score tiles' stores for the
/// vector loads (neither forwards from a store in flight).
struct TileFold {
  alignas(64) uint16_t queries[kMaxAmxHeadDim / 32 * 2 * kTileHalves];
  /// The step's weight tiles, written by weigh and read by accumulate.
  WeightTile weights[kStepPages];
  Step steps[2];
  LaneState state;
  /// Between weigh and accumulate: the step's correction, the lanes that
  /// had seen a key before it, and whether the next step was scored.
  __m512 correction;
  __mmask16 seen = 0;
  bool scoredNext = false;
  int64_t firstLimit = 0, lastLimit = 0; ///< over the tile's rows
  int32_t pageEnd = 0;
  int current = 0;
  bool started = false, finished = false;

  SPANC_AMX_STEP void begin(const AmxTileRows &tile, int headDim,
                            int64_t itemStart, int32_t itemPageEnd);
  /// Where the pass writes the pages of the step it feeds next: the step
  /// slot not in flight, in place (weigh's copy of the 128-byte array, read
  /// as vectors right after the pass's scalar stores to its fields, held
  /// 17 % of weigh's samples in perf; the 15-document stock prefill's
  /// attention 4.0-4.4 -> 3.6-3.8 s without it).
  StepPages &fedPages() { return steps[started ? 1 - current : current].pages; }
  /// The first half of folding the step in flight: its max, correction
  /// and weights, with the fed step (if `scoreNext`) scored beside them.
  SPANC_AMX_STEP void weigh(bool scoreNext, int headDim);
  /// The second half: O^T corrected and P.V accumulated, beside the max
  /// passes over the next step's scores.
  SPANC_AMX_STEP void accumulate(int headDim);
  /// Feeds the step in fedPages() (at least one page present): scores it,
  /// or, past the first, weighs the step before it beside scoring it
  /// (true: accumulate must follow).
  SPANC_AMX_STEP bool feed(int headDim);
  /// Folds the last step and writes the tile's result.
  SPANC_AMX_STEP void finish(const AmxTileRows &tile, int headDim);
};

SPANC_AMX_STEP void TileFold::begin(const AmxTileRows &tile, int headDim,
                                    int64_t itemStart, int32_t itemPageEnd) {
  packQueryTiles(tile, headDim, queries);
  // Limits relative to the item's first page, clamped to int32 (a page is
  // at most the item's length past it).
  constexpr int64_t kSeesAll = int64_t(1) << 30;
  alignas(64) int32_t limits[kMaxRows];
  firstLimit = lastLimit = tile.limit[0];
  for (int row = 0; row < kMaxRows; ++row) {
    const int64_t limit =
        row < tile.rows ? tile.limit[row] - itemStart : kSeesAll;
    limits[row] = int32_t(std::clamp<int64_t>(limit, -1, kSeesAll));
    if (row < tile.rows) {
      firstLimit = std::min(firstLimit, tile.limit[row]);
      lastLimit = std::max(lastLimit, tile.limit[row]);
    }
  }
  state.max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  state.sum = _mm512_setzero_ps();
  state.limit = _mm512_load_si512(limits);
  std::memset(state.accumulator, 0, sizeof(float) * headDim * 16);
  pageEnd = itemPageEnd;
  current = 0;
  started = finished = false;
}

// A software pipeline over the steps, so that the tile unit and the
// vector units work side by side at the grain of a page: step i's
// weights are computed page by page between step i + 1's score
// products, and step i's P.V products page by page between the max
// passes over step i + 1's scores (each phase alone is a long run of
// one kind of instruction that the out-of-order window cannot bridge).
SPANC_AMX_STEP bool TileFold::feed(int headDim) {
  if (started) {
    weigh(true, headDim);
    return true;
  }
  started = true;
  Step &step = steps[current];
  for (int slot = 0; slot < kStepPages; ++slot)
    if (step.pages[slot].keys)
      scorePage(slot, headDim, queries, step.pages[slot].keys);
  for (int slot = 0; slot < kStepPages; ++slot)
    if (step.pages[slot].keys)
      storeSlot(slot, step.scores[slot]);
  step.max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int slot = 0; slot < kStepPages; ++slot)
    if (step.pages[slot].keys)
      step.max =
          _mm512_max_ps(step.max, pageMax(step.pages[slot], step.scores[slot],
                                          state.limit, step.visible[slot]));
  return false;
}

SPANC_AMX_STEP void TileFold::weigh(bool scoreNext, int headDim) {
  const __m512 negativeInfinity =
      _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  Step &step = steps[current];
  Step &next = steps[1 - current];
  const bool hasNext = scoreNext;
  scoredNext = hasNext;

  // This step's max, correction and weights, between the next step's
  // score products.
  // A lane's reference moves only when the step's max passes it by more
  // than kMaxLead (see the file comment).
  const __m512 newMax = _mm512_mask_mov_ps(
      state.max,
      _mm512_cmp_ps_mask(step.max,
                         _mm512_add_ps(state.max, _mm512_set1_ps(kMaxLead)),
                         _CMP_GT_OQ),
      step.max);
  seen = _mm512_cmp_ps_mask(state.max, negativeInfinity, _CMP_NEQ_OQ);
  correction =
      _mm512_maskz_mov_ps(seen, softmaxExp2(_mm512_sub_ps(state.max, newMax)));
  // A lane with no visible key yet keeps -inf; its weights are all
  // masked, and subtracting 0 keeps them from being NaN first.
  const __m512 subtract = _mm512_maskz_mov_ps(
      _mm512_cmp_ps_mask(newMax, negativeInfinity, _CMP_NEQ_OQ), newMax);
  __m512 stepSum = _mm512_setzero_ps();
  for (int chunk = 0; chunk < headDim / 32; ++chunk) {
    if (hasNext) {
      _tile_loadd(6, queries + chunk * 2 * kTileHalves, 64);
      _tile_loadd(7, queries + chunk * 2 * kTileHalves + kTileHalves, 64);
    }
    for (int slot = 0; slot < kStepPages; ++slot) {
      if (chunk == 0 && step.pages[slot].keys)
        pageWeights(step.pages[slot], step.scores[slot], subtract,
                    step.visible[slot], weights[slot], stepSum);
      if (hasNext && next.pages[slot].keys) {
        if (chunk == 0)
          zeroSlot(slot);
        dispatchScoreChunk(slot,
                           next.pages[slot].keys + chunk * 2 * kTileHalves);
      }
    }
  }
  state.sum = _mm512_add_ps(_mm512_mul_ps(state.sum, correction), stepSum);
  state.max = newMax;
  if (hasNext)
    for (int slot = 0; slot < kStepPages; ++slot)
      if (next.pages[slot].keys)
        storeSlot(slot, next.scores[slot]);
}

SPANC_AMX_STEP void TileFold::accumulate(int headDim) {
  const __m512 negativeInfinity =
      _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  Step &step = steps[current];
  Step &next = steps[1 - current];
  const bool hasNext = scoredNext;
  // O^T = O^T * correction, only when some seen lane's max moved (a lane
  // times 1 keeps its bits; one that had seen nothing is zero anyway).
  if (_mm512_mask_cmp_ps_mask(seen, correction, _mm512_set1_ps(1.0f),
                              _CMP_NEQ_UQ)) {
    for (int dim = 0; dim < headDim; ++dim) {
      float *row = state.accumulator + dim * 16;
      _mm512_store_ps(row, _mm512_mul_ps(_mm512_load_ps(row), correction));
    }
  }
  // O^T += V^T . P^T, four 16-dim chunks at a time on tiles 0-3, between
  // the max passes over the next step's pages.
  next.max = negativeInfinity;
  const int chunks = headDim / 16;
  for (int group = 0; group < chunks; group += 4) {
    const int count = std::min(4, chunks - group);
    for (int slot = 0; slot < count; ++slot)
      loadSlot(slot, state.accumulator + (group + slot) * 16 * 16);
    for (int page = 0; page < kStepPages; ++page) {
      if (step.pages[page].keys) {
        _tile_loadd(4, weights[page].doubled, 64);
        for (int slot = 0; slot < count; ++slot)
          dispatchAccumulate(slot, step.pages[page].values +
                                       (group + slot) * kTileHalves);
      }
      if (group == 0 && hasNext && next.pages[page].keys)
        next.max =
            _mm512_max_ps(next.max, pageMax(next.pages[page], next.scores[page],
                                            state.limit, next.visible[page]));
    }
    for (int slot = 0; slot < count; ++slot)
      storeSlot(slot, state.accumulator + (group + slot) * 16 * 16);
  }
  current = 1 - current;
}

SPANC_AMX_STEP void TileFold::finish(const AmxTileRows &tile, int headDim) {
  finished = true;
  if (started) {
    weigh(false, headDim);
    accumulate(headDim);
  }
  // Back to rows: the normalized output rows (acc * (1 / sum), 0 for a row
  // that saw nothing), or a split's state with its max in natural log
  // units again.
  alignas(64) float maxima[16], sums[16], inverses[16];
  const __mmask16 seen =
      _mm512_cmp_ps_mask(state.sum, _mm512_setzero_ps(), _CMP_GT_OQ);
  _mm512_store_ps(maxima,
                  _mm512_mul_ps(state.max, _mm512_set1_ps(0.693147180559945f)));
  _mm512_store_ps(sums, state.sum);
  _mm512_store_ps(inverses,
                  _mm512_maskz_div_ps(seen, _mm512_set1_ps(1.0f), state.sum));
  const int stateStride = 2 + headDim;
  if (tile.partial)
    for (int row = 0; row < tile.rows; ++row) {
      tile.partial[row * stateStride] = maxima[row];
      tile.partial[row * stateStride + 1] = sums[row];
    }
  for (int chunk = 0; chunk < headDim / 16; ++chunk) {
    __m512i columns[16];
    for (int dim = 0; dim < 16; ++dim)
      columns[dim] =
          _mm512_load_si512(state.accumulator + (chunk * 16 + dim) * 16);
    transpose16(columns);
    for (int row = 0; row < tile.rows; ++row) {
      const __m512 values = _mm512_castsi512_ps(columns[row]);
      if (tile.partial)
        _mm512_storeu_ps(tile.partial + row * stateStride + 2 + chunk * 16,
                         values);
      else
        _mm512_storeu_ps(tile.output[row] + chunk * 16,
                         _mm512_mul_ps(values, _mm512_set1_ps(inverses[row])));
    }
  }
}

} // namespace

/// The AMX path over a page pass, tiles of one sequence and KV head whose
/// items start at one page: the pass walks its pages four at a time,
/// packs each page's K and V once (per thread through the block cache,
/// when the call has one, else per step into one of two buffers) and
/// feeds the step to every tile that sees a page of it.
SPANC_AMX_STEP void foldTilesAmx(const CallContext &context,
                                 const AttentionWorkItem *const *items,
                                 const AmxTileRows *const *tiles, int count,
                                 float *blockCache, int32_t *blockCacheTags) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int headDim = context.shape->headDim;
  const int64_t blockElements = int64_t(headDim) * 16;
  const int pageHalves = headDim * 32;
  const AttentionWorkItem &leader = *items[0];
  const int64_t itemStart = context.pageStarts[leader.pageBegin];

  thread_local std::vector<TileFold> folds;
  if (folds.size() < size_t(count))
    folds.resize(size_t(count));
  int32_t passEnd = leader.pageBegin;
  int64_t passLastLimit = std::numeric_limits<int64_t>::min();
  for (int index = 0; index < count; ++index) {
    folds[size_t(index)].begin(*tiles[index], headDim, itemStart,
                               items[index]->pageEnd);
    passEnd = std::max(passEnd, items[index]->pageEnd);
    passLastLimit = std::max(passLastLimit, folds[size_t(index)].lastLimit);
  }
  // Without a block cache, the pages of two steps are packed here (per
  // thread, reused from call to call): a tile folds the step before the
  // one it is fed, and the steps every tile is fed are a prefix of the
  // pass's steps with a page present.
  uint16_t *stepTiles = nullptr;
  if (!blockCache) {
    thread_local std::vector<uint16_t> scratch;
    const size_t halves = size_t(2 * kStepPages * 2 * kMaxPageHalves + 32);
    if (scratch.size() < halves)
      scratch.resize(halves);
    stepTiles = scratch.data() +
                (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64 /
                    sizeof(uint16_t);
  }
  alignas(64) float rotatedKeys[kMaxAmxHeadDim * 16];

  // Whether some tile sees `page`, and where its K and V blocks start.
  auto locate = [&](int32_t page, const uint16_t *&keyBlock,
                    const uint16_t *&valueBlock) {
    if (page >= passEnd || batch.validTokens[page] == 0 ||
        context.pageStarts[page] > passLastLimit)
      return false;
    const int64_t offset = int64_t(batch.blockIds[page]) * kv.blockStride +
                           leader.kvHead * kv.headStride;
    keyBlock = static_cast<const uint16_t *>(kv.keys) + offset;
    valueBlock = static_cast<const uint16_t *>(kv.values) + offset;
    return true;
  };
  configureAttentionTiles();
  int buffer = 0;
  for (int32_t first = leader.pageBegin;
       first < passEnd && context.pageStarts[first] <= passLastLimit;
       first += kStepPages) {
    // A later step's K and V blocks into the cache ahead of their packing
    // (unless the thread's block cache has the page packed already): a
    // page list's blocks lie anywhere in the pool, so the hardware
    // prefetchers cannot run ahead into the next block. In the loop, not
    // in a helper: GCC takes a function that only prefetches for pure and
    // drops its calls.
    for (int slot = 0; slot < kStepPages; ++slot) {
      const int32_t page = first + kPrefetchSteps * kStepPages + slot;
      const uint16_t *keyBlock, *valueBlock;
      if (!locate(page, keyBlock, valueBlock) ||
          (blockCache && blockCacheTags[page] == leader.kvHead + 1))
        continue;
      for (int64_t half = 0; half < blockElements; half += 32) {
        _mm_prefetch(reinterpret_cast<const char *>(keyBlock + half),
                     _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(valueBlock + half),
                     _MM_HINT_T0);
      }
    }
    // The step's pages that some tile sees, packed.
    StepPages packed;
    bool any = false;
    for (int slot = 0; slot < kStepPages; ++slot) {
      const int32_t page = first + slot;
      const uint16_t *keyBlock, *valueBlock;
      if (!locate(page, keyBlock, valueBlock))
        continue;
      const int valid = batch.validTokens[page];
      const int64_t logicalStart = context.pageStarts[page];
      uint16_t *keys;
      bool ready = false;
      if (blockCache) {
        // The thread's packed copy of this page for this KV head: K's and
        // V's tiles, 2 * headDim * 32 halves, exactly the entry's 2 *
        // blockElements floats.
        keys = reinterpret_cast<uint16_t *>(blockCache +
                                            int64_t(page) * 2 * blockElements);
        ready = blockCacheTags[page] == leader.kvHead + 1;
        blockCacheTags[page] = leader.kvHead + 1;
      } else {
        keys = stepTiles + (buffer * kStepPages + slot) * 2 * pageHalves;
      }
      uint16_t *values = keys + pageHalves;
      if (!ready) {
        if (context.options->keyRope) {
          rotateKeyBlockAvx512(context, keyBlock, logicalStart, rotatedKeys);
          packKeyTiles(static_cast<const float *>(rotatedKeys), headDim, keys);
        } else {
          packKeyTiles(keyBlock, headDim, keys);
        }
        packValueTiles(valueBlock, valid, headDim, values);
      }
      packed[slot] = StepPage{keys, values, valid,
                              int32_t(logicalStart - itemStart), false};
      any = true;
    }
    if (!any)
      continue;
    buffer = 1 - buffer;
    // Each tile's view of the step: the pages inside its item and its
    // rows' limits. The tiles weigh the step before it, then accumulate
    // it (TileFold).
    bool accumulates[kMaxPassTiles];
    for (int index = 0; index < count; ++index) {
      accumulates[index] = false;
      TileFold &fold = folds[size_t(index)];
      StepPages &pages = fold.fedPages();
      pages = StepPages{};
      bool sees = false;
      for (int slot = 0; slot < kStepPages; ++slot) {
        const int32_t page = first + slot;
        if (!packed[slot].keys || page >= fold.pageEnd ||
            context.pageStarts[page] > fold.lastLimit)
          continue;
        pages[slot] = packed[slot];
        pages[slot].whole = packed[slot].valid == 16 &&
                            context.pageStarts[page] + 15 <= fold.firstLimit;
        sees = true;
      }
      if (sees)
        accumulates[index] = fold.feed(headDim);
      else if (!fold.finished)
        // Its last step's pages may be packed over from the next step on.
        fold.finish(*tiles[index], headDim);
    }
    for (int index = 0; index < count; ++index)
      if (accumulates[index])
        folds[size_t(index)].accumulate(headDim);
  }
  for (int index = 0; index < count; ++index)
    if (!folds[size_t(index)].finished)
      folds[size_t(index)].finish(*tiles[index], headDim);
  releaseAttentionTiles();
}

} // namespace spanc::cpu::attention
