//===- AttentionInternal.h - What the attention files share ---------------===//
//
// The tile state, the call context and the softmax bookkeeping that the
// driver (AttentionPlan.cpp plans a call, Attention.cpp runs it) and its
// per-instruction-set tile steps (AttentionScalar.cpp, AttentionAvx512.cpp,
// AttentionAmx.cpp) share.
// Internal to runtime/kernels/cpu:attention; callers include Attention.h.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ATTENTIONINTERNAL_H
#define SPANC_RUNTIME_KERNELS_CPU_ATTENTIONINTERNAL_H

#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace spanc::cpu::attention {

constexpr int kMaxRows = 16;
/// The AMX path's largest head dim (its per-step tiles live on the stack).
constexpr int kMaxAmxHeadDim = 128;
using kernels::kMaxBlockSize;
using kernels::kMaxHeadDim;
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
  alignas(64) float query[kMaxRows * kernels::kMaxHeadDim];
  /// The same queries dimension-major (the 16 rows of one dim are one
  /// vector; rows past `rows` zero) for foldBlockByDim.
  alignas(64) float queryByDim[kernels::kMaxHeadDim * kMaxRows];
  alignas(64) float accumulator[kMaxRows * kernels::kMaxHeadDim];
  /// foldBlockByDim's accumulator, dimension-major like queryByDim (the 16
  /// rows of one dim are one vector); foldPassAvx512 transposes it into
  /// `accumulator` when the item's pages are folded.
  alignas(64) float accumulatorByDim[kernels::kMaxHeadDim * kMaxRows];
};

/// Tiles of more rows than this widen f16 blocks to f32 once per block.
constexpr int kRowsToWidenBlock = 4;

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

/// The scalar path over the item's pages (any block size and head dim;
/// the reference the fast paths are tested against).
template <typename Element>
void foldPagesScalar(const CallContext &context, const AttentionWorkItem &item,
                     TileState &tile);

/// The AVX-512 path of a page pass's prompt tiles (blockSize 16, headDim
/// % 16 == 0; items of one sequence and KV head starting at one page, set
/// up in `tiles`): page by page, each page read, rotated and widened once
/// (or taken from the per-thread block cache when it is set) and folded
/// into every tile that sees it while it is in L1 — decode-size tiles
/// block by row, larger ones block by dim. Each tile folds its pages in
/// order, as alone.
template <typename Element>
void foldPassAvx512(const CallContext &context,
                    const AttentionWorkItem *const *items,
                    TileState *const *tiles, int count, float *blockCache,
                    int32_t *blockCacheTags);

/// The AVX2 path of CPUs without AVX-512 (blockSize 16, headDim % 8 == 0)
/// over a page pass's tiles (items of one sequence and KV head starting
/// at one page, set up in `tiles`, row-major): each page widened (or
/// rotated) once into f32, then folded into every tile that sees it,
/// every row's arithmetic its own (AttentionAvx2.cpp).
template <typename Element>
void foldPassAvx2(const CallContext &context,
                  const AttentionWorkItem *const *items,
                  TileState *const *tiles, int count);

/// Pages per online-softmax step of a decode tile (foldDecodePagesAvx512).
constexpr int kDecodeStepPages = 4;

/// The AVX-512 path of decode rows (RowKind::Decode; blockSize 16, headDim
/// % 16 == 0): the tile's rows (a token's query heads) fold the item's
/// pages kDecodeStepPages at a time, the scores of a step's pages computed
/// side by side, one max, correction and sum per row and step.
template <typename Element>
void foldDecodePagesAvx512(const CallContext &context,
                           const AttentionWorkItem &item, TileState &tile);

/// The most tiles one page pass folds together (AttentionPlan.cpp).
constexpr int kMaxPassTiles = 16;

/// An AMX tile's rows: each row's last visible logical key, where its
/// query is read (scaled by `scale` as the tile packs it, so no row is
/// copied first) and where its result goes: its normalized output row,
/// or, for one split of a group, its state in `partial` (max, sum, then
/// the accumulator, per row).
struct AmxTileRows {
  int rows = 0;
  float scale = 1;
  int64_t limit[kMaxRows];
  const float *query[kMaxRows];
  float *output[kMaxRows];
  float *partial = nullptr;
};

/// The AMX path over a page pass (f16 K/V, headDim % 32 == 0 and at most
/// kMaxAmxHeadDim): `count` (at most kMaxPassTiles) items of one sequence
/// and KV head that start at one page, each with its rows.
void foldTilesAmx(const CallContext &context,
                  const AttentionWorkItem *const *items,
                  const AmxTileRows *const *tiles, int count, float *blockCache,
                  int32_t *blockCacheTags);

/// Copies the block's K for one head into `out` as f32 with each slot
/// rotated to its logical index (rope-in-kernel), for 16-slot blocks: a
/// pair's two dimension rows are two vectors, its cos/sin at the 16
/// consecutive logical indices two loads from the pair-major table (slots
/// past the valid ones are rotated too, by the next positions' angles, and
/// never scored). rotateHead's formula (a*c - b*s, a*s + b*c), though
/// not its bits: the compiler fuses a product and the sum into an FMA.
/// Instantiated for f32 and f16 in AttentionAvx512.cpp; the AMX path packs
/// the rotated keys.
template <typename Element>
SPANC_AVX512 void rotateKeyBlockAvx512(const CallContext &context,
                                       const Element *keyBlock,
                                       int64_t logicalStart, float *out);

/// queryByDim[dim][row] = base[rowOffsets[row] + dim] * scale for the
/// tile's rows, 0 for the 16 - rows lanes past them: one gather per dim
/// instead of a scalar transposition (a split tile folds only a few pages,
/// so its setup is not negligible).
SPANC_AVX512 void gatherQueriesByDim(const float *base,
                                     const int32_t *rowOffsets, int rows,
                                     int headDim, float scale,
                                     float *queryByDim);

/// Whether a sequence's rows are decode rows (f32 products, splits by its
/// length): the batch says so, or else one query is a decode step.
inline bool isDecode(const PagedAttentionBatch &batch, int sequence) {
  return batch.decodeSequences ? batch.decodeSequences[sequence] != 0
                               : batch.queryOffsets[sequence + 1] -
                                         batch.queryOffsets[sequence] ==
                                     1;
}

/// One call, planned (AttentionPlan.cpp): its work items, their order and page
/// passes (in the workspace), what every pass needs and the call's context.
/// Plain values, so a team can share one thread's plan (copyprivate).
struct PlannedCall : PagedAttentionPlan {
  CallContext context;
};

/// Whether a planned call folds `item` on AMX tiles. Decode steps keep f32
/// products: packing each block into tiles for one query row would cost
/// more than the products save. The choice depends on the sequence alone.
inline bool foldsOnAmx(const PlannedCall &call, const AttentionWorkItem &item) {
  return call.useAmx && !isDecode(*call.context.batch, item.sequence);
}

/// Whether a planned call folds `item` in decode steps of four pages
/// (foldDecodePagesAvx512): a decode sequence's rows on the AVX-512 path.
inline bool foldsDecodeSteps(const PlannedCall &call,
                             const AttentionWorkItem &item) {
  return call.useAvx512 && isDecode(*call.context.batch, item.sequence);
}

/// Whether `item` runs in one page pass with the other tiles of its
/// sequence, KV head and key range: every prompt tile on AMX or AVX-512,
/// and every tile on AVX2, where the pass packs (AMX), or rotates and
/// widens (AVX-512, AVX2), each page once for all of its tiles and folds
/// it into each while it is in L1.
inline bool sharesPagePass(const PlannedCall &call,
                           const AttentionWorkItem &item) {
  return foldsOnAmx(call, item) ||
         (call.useAvx512 && !foldsDecodeSteps(call, item)) || call.useAvx2;
}

/// Plans a call that `numThreads` threads will run: fills the workspace's
/// page starts, work items, split groups, order and page passes, and
/// sizes the block cache where a pass reads through it.
PlannedCall planCall(const PagedAttentionShape &shape,
                     const PagedAttentionBatch &batch, const PagedKvView &kv,
                     const float *queries, const PagedAttentionOptions &options,
                     AttentionWorkspace &workspace, int numThreads);

} // namespace spanc::cpu::attention

#endif // SPANC_RUNTIME_KERNELS_CPU_ATTENTIONINTERNAL_H
