//===- Attention.cpp - Paged causal attention on the CPU ------------------===//
//
// A tile is up to kMaxRows query rows (token x head-in-group pairs) of one
// sequence and KV head. For each visible page the tile computes its scores
// against the block's (up to 16) keys, folds them into per-row online
// softmax states (running max, running sum, accumulator), and never
// materializes a score row; everything is computed in f32 (the AMX path:
// bf16 high/low products, f32 sums).
//
// This file is the driver: it cuts a call into work items (a tile of rows
// against a range of its pages), sets up each tile, hands its pages to one
// tile step and merges split tiles. The tile steps, one file per
// instruction set, fold blocks into the tile state:
//   AttentionScalar.cpp  any shape; the reference the others are tested
//                        against;
//   AttentionAvx512.cpp  blockSize 16 and headDim % 16 == 0;
//   AttentionAmx.cpp     f16 K/V on a CPU with AMX: every tile of a
//                        sequence of prompt rows (decode rows stay in f32).
// Every path keeps a row's result independent of the other rows of its
// tile and of what shares the call.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Attention.h"

#include "runtime/kernels/cpu/AttentionInternal.h"
#include "runtime/kernels/cpu/CpuFeatures.h"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>

namespace spanc::cpu {

using namespace attention;

namespace {

/// The most floats the per-thread block caches may take together (256 MiB;
/// a 16k-token prompt takes 8 MiB per thread with head dim 64).
constexpr int64_t kMaxBlockCacheFloats = int64_t(64) << 20;

/// Where `item` keeps its split state (`stateFloats` a state), or null
/// when it is its group's only item.
float *partialOf(float *partials, int64_t stateFloats,
                 const AttentionWorkItem &item) {
  return item.partial >= 0 ? partials + item.partial * stateFloats : nullptr;
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

/// Where a work item's rows stand in their sequence: its first query row,
/// query count and length, its query indices (null: the last numQueries
/// positions) and the score scale of its pages.
struct ItemRows {
  int32_t firstQueryRow;
  int64_t numQueries, length;
  const int32_t *queryIndices;
  float scale;

  /// The last logical key the query of `token` (of the item's sequence)
  /// sees.
  int64_t limit(int64_t token) const {
    return queryIndices ? queryIndices[token] : length - numQueries + token;
  }
};

ItemRows itemRows(const CallContext &context, const AttentionWorkItem &item) {
  const PagedAttentionShape &shape = *context.shape;
  const PagedAttentionBatch &batch = *context.batch;
  ItemRows rows;
  rows.firstQueryRow = batch.queryOffsets[item.sequence];
  rows.numQueries = batch.queryOffsets[item.sequence + 1] - rows.firstQueryRow;
  const int32_t sequencePages = batch.pageOffsets[item.sequence + 1];
  rows.length = context.pageStarts[sequencePages - 1] +
                batch.validTokens[sequencePages - 1];
  rows.queryIndices =
      batch.queryIndices ? batch.queryIndices + rows.firstQueryRow : nullptr;
  // Span pages of a scaled sequence score at the span temperature.
  rows.scale = item.spanPages
                   ? shape.scale / batch.spanScaling[item.sequence].temperature
                   : shape.scale;
  return rows;
}

/// Sets up the tile of one work item: its rows' limits and scaled queries
/// (row-major, or dimension-major for foldBlockByDim), its empty softmax
/// state.
void setUpTile(const CallContext &context, const AttentionWorkItem &item,
               bool byDim, TileState &tile) {
  const PagedAttentionShape &shape = *context.shape;
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const ItemRows rows = itemRows(context, item);
  const int32_t firstQueryRow = rows.firstQueryRow;
  const float scale = rows.scale;
  tile.rows = item.numRows;
  std::fill(tile.maxScore, tile.maxScore + kMaxRows, kNegativeInfinity);
  std::fill(tile.sum, tile.sum + kMaxRows, 0.0f);
  alignas(64) int32_t rowOffsets[kMaxRows] = {};
  bool offsetsFit = true;
  for (int row = 0; row < tile.rows; ++row) {
    int tileRow = item.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = item.kvHead * groupSize + tileRow % groupSize;
    tile.limit[row] = rows.limit(token);
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
        tile.query[row * headDim + dim] = query[dim] * scale;
      // foldBlockByDim's tiles write their rows from accumulatorByDim.
      std::memset(tile.accumulator + row * headDim, 0, sizeof(float) * headDim);
    }
  }
  if (!byDim)
    return;
  std::memset(tile.accumulatorByDim, 0, sizeof(float) * headDim * kMaxRows);
  const float *base = context.queries + firstQueryRow * shape.queryRowStride;
  if (offsetsFit) {
    gatherQueriesByDim(base, rowOffsets, tile.rows, headDim, scale,
                       tile.queryByDim);
    return;
  }
  // Rows past the tile score as zero queries (and are masked out).
  std::fill(tile.queryByDim, tile.queryByDim + headDim * kMaxRows, 0.0f);
  for (int row = 0; row < tile.rows; ++row) {
    int tileRow = item.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = item.kvHead * groupSize + tileRow % groupSize;
    const float *query =
        base + token * shape.queryRowStride + int64_t(head) * headDim;
    for (int dim = 0; dim < headDim; ++dim)
      tile.queryByDim[dim * kMaxRows + row] = query[dim] * scale;
  }
}

/// Runs one work item alone: a tile of rows against a range of its pages,
/// in decode steps on AVX-512 or on the scalar path.
template <typename Element>
void runItem(const CallContext &context, const AttentionWorkItem &item,
             bool decodeSteps, float *partial, float *output) {
  TileState tile;
  setUpTile(context, item, /*byDim=*/false, tile);
  if (decodeSteps)
    foldDecodePagesAvx512<Element>(context, item, tile);
  else
    foldPagesScalar<Element>(context, item, tile);
  finishItem(context, item, tile, partial, output);
}

/// This thread's tile states for an AVX-512 page pass (kMaxPassTiles of
/// ~64 KiB: more than an OpenMP thread's stack should hold).
TileState *passTileStates() {
  thread_local std::unique_ptr<TileState[]> states(
      new TileState[kMaxPassTiles]);
  return states.get();
}

/// Runs the AVX-512 prompt items of one page pass (tiles of one sequence
/// and KV head whose items start at one page) together; `blockCache`
/// (null: none) keeps each page for the thread's later passes.
template <typename Element>
void runPassAvx512(const CallContext &context,
                   const AttentionWorkItem *const *items, int count,
                   float *partials, int64_t stateFloats, float *output,
                   float *blockCache, int32_t *blockCacheTags) {
  auto finish = [&](int index, const TileState &tile) {
    finishItem(context, *items[index], tile,
               partialOf(partials, stateFloats, *items[index]), output);
  };
  if (blockCache) {
    // Tile by tile, each streaming the cached pages with its state in L1.
    TileState tile;
    TileState *const tilePointer = &tile;
    for (int index = 0; index < count; ++index) {
      setUpTile(context, *items[index],
                items[index]->numRows > kRowsToWidenBlock, tile);
      foldPassAvx512<Element>(context, items + index, &tilePointer, 1,
                              blockCache, blockCacheTags);
      finish(index, tile);
    }
    return;
  }
  TileState *states = passTileStates();
  TileState *tiles[kMaxPassTiles];
  for (int index = 0; index < count; ++index) {
    tiles[index] = &states[index];
    // foldBlockByDim reads only queryByDim, foldBlockByRow only query.
    setUpTile(context, *items[index], items[index]->numRows > kRowsToWidenBlock,
              *tiles[index]);
  }
  foldPassAvx512<Element>(context, items, tiles, count, nullptr, nullptr);
  for (int index = 0; index < count; ++index)
    finish(index, *tiles[index]);
}

/// The rows of an AMX tile: limits, query and output places (the tile
/// reads and writes them directly; setUpTile's copies and finishItem's
/// pass cost as much as folding a few pages).
void describeAmxTile(const CallContext &context, const AttentionWorkItem &item,
                     float *partial, float *output, AmxTileRows &tile) {
  const PagedAttentionShape &shape = *context.shape;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const ItemRows rows = itemRows(context, item);
  const int32_t firstQueryRow = rows.firstQueryRow;
  tile.rows = item.numRows;
  tile.scale = rows.scale;
  tile.partial = partial;
  for (int row = 0; row < tile.rows; ++row) {
    const int tileRow = item.firstRow + row;
    const int64_t token = tileRow / groupSize;
    const int64_t head = item.kvHead * groupSize + tileRow % groupSize;
    tile.limit[row] = rows.limit(token);
    tile.query[row] = context.queries +
                      (firstQueryRow + token) * shape.queryRowStride +
                      head * shape.headDim;
    tile.output[row] = output +
                       (firstQueryRow + token) * shape.outputRowStride +
                       head * shape.headDim;
  }
}

/// Runs the AMX work items of one page pass (tiles of one sequence and KV
/// head whose items start at one page) together.
void runPassAmx(const CallContext &context,
                const AttentionWorkItem *const *items, int count,
                float *partials, float *output, float *blockCache,
                int32_t *blockCacheTags) {
  const int64_t stateFloats = int64_t(kMaxRows) * (2 + context.shape->headDim);
  AmxTileRows tiles[kMaxPassTiles];
  const AmxTileRows *tilePointers[kMaxPassTiles];
  for (int index = 0; index < count; ++index) {
    const AttentionWorkItem &item = *items[index];
    describeAmxTile(context, item, partialOf(partials, stateFloats, item),
                    output, tiles[index]);
    tilePointers[index] = &tiles[index];
  }
  foldTilesAmx(context, items, tilePointers, count, blockCache, blockCacheTags);
}

/// The split states of one kind of pages of a row, combined: the
/// log-sum-exp of their scores (-inf: no visible key) and their normalized
/// weighted values in `values`.
float combineSplits(const AttentionWorkItem *splits, int numSplits,
                    bool spanPages, const float *partials, int row, int headDim,
                    float *values) {
  const int64_t stateFloats = int64_t(kMaxRows) * (2 + headDim);
  float kindMax = kNegativeInfinity;
  for (int split = 0; split < numSplits; ++split) {
    const float *state =
        partials + splits[split].partial * stateFloats + row * (2 + headDim);
    if (splits[split].spanPages == spanPages && state[1] > 0)
      kindMax = std::max(kindMax, state[0]);
  }
  std::fill(values, values + headDim, 0.0f);
  if (kindMax == kNegativeInfinity)
    return kNegativeInfinity;
  float total = 0;
  for (int split = 0; split < numSplits; ++split) {
    const float *state =
        partials + splits[split].partial * stateFloats + row * (2 + headDim);
    if (splits[split].spanPages != spanPages || state[1] == 0)
      continue;
    float weight = std::exp(state[0] - kindMax);
    total += state[1] * weight;
    for (int dim = 0; dim < headDim; ++dim)
      values[dim] += state[2 + dim] * weight;
  }
  for (int dim = 0; dim < headDim; ++dim)
    values[dim] /= total;
  return kindMax + std::log(total);
}

/// Combines the split states of a scaled sequence's group (SpanScaling):
/// each kind of pages is normalized on its own, then the two are weighed
/// by softmax(massScale * spanLogSumExp, otherLogSumExp).
void mergeScaledGroup(const CallContext &context,
                      const AttentionWorkItem *splits, const float *partials,
                      float *output) {
  const PagedAttentionShape &shape = *context.shape;
  const int headDim = shape.headDim;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const AttentionWorkItem &first = splits[0];
  const int32_t firstQueryRow = context.batch->queryOffsets[first.sequence];
  const float massScale = context.batch->spanScaling[first.sequence].massScale;
  alignas(64) float spanValues[kernels::kMaxHeadDim];
  alignas(64) float otherValues[kernels::kMaxHeadDim];
  for (int row = 0; row < first.numRows; ++row) {
    float spanMass = combineSplits(splits, first.numSplits, true, partials, row,
                                   headDim, spanValues);
    float otherMass = combineSplits(splits, first.numSplits, false, partials,
                                    row, headDim, otherValues);
    if (spanMass != kNegativeInfinity)
      spanMass *= massScale;
    const float top = std::max(spanMass, otherMass);
    const float spanWeight =
        spanMass == kNegativeInfinity ? 0.0f : std::exp(spanMass - top);
    const float otherWeight =
        otherMass == kNegativeInfinity ? 0.0f : std::exp(otherMass - top);
    const float total = spanWeight + otherWeight;
    const float inverse = total > 0 ? 1.0f / total : 0.0f;
    int tileRow = first.firstRow + row;
    int64_t token = tileRow / groupSize;
    int head = first.kvHead * groupSize + tileRow % groupSize;
    float *out = output + (firstQueryRow + token) * shape.outputRowStride +
                 int64_t(head) * headDim;
    for (int dim = 0; dim < headDim; ++dim)
      out[dim] =
          (spanValues[dim] * spanWeight + otherValues[dim] * otherWeight) *
          inverse;
  }
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

/// Whether a sequence's rows are decode rows (f32 products, splits by its
/// length): the batch says so, or else one query is a decode step.
bool isDecode(const PagedAttentionBatch &batch, int sequence) {
  return batch.decodeSequences ? batch.decodeSequences[sequence] != 0
                               : batch.queryOffsets[sequence + 1] -
                                         batch.queryOffsets[sequence] ==
                                     1;
}

/// Where AVX-512 cuts one sequence's prompt rows into tiles: the first row
/// of each tile, then `rows`. A tile of more than kRowsToWidenBlock rows
/// folds every page up to its last row's limit on all 16 lanes, however
/// many of its rows see the page; a smaller one folds each row's own
/// pages, at about kByRowCost times a lane's work. So a hit whose rows sit
/// far apart (each document's end block, then the tail, placed by
/// queryIndices) is cut where the limits jump (cuts minimizing that lane
/// work plus kTileCost a tile; ties: fewer tiles); contiguous rows keep
/// full tiles (cut by the model, a fresh 512-token prompt ran 5 % slower).
/// Any cut gives each row the same bits (its arithmetic is its own).
void cutPromptTiles(int64_t rows, int groupSize, const int64_t *pagesSeen,
                    std::vector<double> &cost, std::vector<int32_t> &from,
                    std::vector<int32_t> &cuts) {
  constexpr double kByRowCost = 1.25, kTileCost = 32;
  cost.assign(size_t(rows + 1), 0);
  from.assign(size_t(rows + 1), 0);
  for (int64_t end = 1; end <= rows; ++end) {
    double best = std::numeric_limits<double>::infinity();
    double rowPages = 0; // the pages rows [first, end) see, summed
    for (int64_t first = end - 1; first >= std::max<int64_t>(0, end - kMaxRows);
         --first) {
      rowPages += double(pagesSeen[first / groupSize]);
      const double work = end - first > kRowsToWidenBlock
                              ? 16.0 * double(pagesSeen[(end - 1) / groupSize])
                              : kByRowCost * rowPages;
      const double total = cost[size_t(first)] + work + kTileCost;
      if (total <= best) // the larger tile on a tie
        best = total, from[size_t(end)] = int32_t(first);
    }
    cost[size_t(end)] = best;
  }
  cuts.clear();
  for (int64_t end = rows; end > 0; end = from[size_t(end)])
    cuts.push_back(int32_t(end));
  cuts.push_back(0);
  std::reverse(cuts.begin(), cuts.end());
}

/// Fills the workspace's page starts (each page's logical index) and cuts
/// the call into work items and split groups; returns the number of
/// partial states the splits need. `fitTiles`: cut prompt rows placed by
/// queryIndices where their limits jump (cutPromptTiles, the AVX-512
/// tiles' costs).
int32_t planWorkItems(const PagedAttentionShape &shape,
                      const PagedAttentionBatch &batch,
                      const PagedAttentionOptions &options, bool fitTiles,
                      AttentionWorkspace &workspace) {
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int minPages =
      options.minPagesPerSplit > 0 ? options.minPagesPerSplit : 8;
  const int promptSplitPages = options.promptSplitPages > 0
                                   ? options.promptSplitPages
                                   : kDefaultPromptSplitPages;

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

  // Each tile's visible pages are split into ranges (flash-decoding style),
  // never by the batch or the thread count: a row's output must not depend
  // on what shares its step, or a cache hit, a bulk and a solo run could
  // round differently and flip a greedy choice. A prompt tile's ranges are
  // fixed chunks of its sequence's page list (promptSplitPages pages from
  // its first page), so a prompt row folds the same ranges up to its own
  // key whatever rows share its tile, its chunk of the prompt or its
  // sequence (runs of one request merged by queryIndices). A decode tile
  // is one token: its ranges follow its own length.
  constexpr int64_t splitTarget = 16;

  // A sequence with SpanScaling whose tile sees any span page.
  auto scaled = [&](int sequence, int32_t pageBegin, int32_t pageEnd) {
    if (!batch.spanPages || !batch.spanScaling ||
        batch.spanScaling[sequence].isIdentity())
      return false;
    for (int32_t page = pageBegin; page < pageEnd; ++page)
      if (batch.spanPages[page])
        return true;
    return false;
  };

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
    const bool decode = isDecode(batch, sequence);
    const int32_t *queryIndices =
        batch.queryIndices ? batch.queryIndices + batch.queryOffsets[sequence]
                           : nullptr;
    std::vector<int32_t> &cuts = workspace.tileCuts;
    cuts.clear();
    if (fitTiles && !decode && queryIndices && rows > kMaxRows) {
      // Pages each query token sees (its limit only grows with the token).
      std::vector<int64_t> &pagesSeen = workspace.tilePagesSeen;
      pagesSeen.resize(size_t(numQueries));
      int32_t seen = pageBegin;
      for (int64_t token = 0; token < numQueries; ++token) {
        const int64_t limit = queryIndices[token];
        while (seen < pageEnd && workspace.pageStarts[size_t(seen)] <= limit)
          ++seen;
        pagesSeen[size_t(token)] = seen - pageBegin;
      }
      cutPromptTiles(rows, groupSize, pagesSeen.data(), workspace.tileCost,
                     workspace.tileFrom, cuts);
    } else {
      for (int64_t firstRow = 0; firstRow < rows; firstRow += kMaxRows)
        cuts.push_back(int32_t(firstRow));
      cuts.push_back(int32_t(rows));
    }
    for (int kvHead = 0; kvHead < shape.numKvHeads; ++kvHead) {
      for (size_t tile = 0; tile + 1 < cuts.size(); ++tile) {
        const int64_t firstRow = cuts[tile];
        const int numRows = int(cuts[tile + 1] - firstRow);
        const int64_t lastToken = (firstRow + numRows - 1) / groupSize;
        const int64_t lastLimit = queryIndices
                                      ? queryIndices[lastToken]
                                      : length - numQueries + lastToken;
        int32_t visibleEnd = pageBegin;
        while (visibleEnd < pageEnd &&
               workspace.pageStarts[size_t(visibleEnd)] <= lastLimit)
          ++visibleEnd;
        // The items of pages [begin, end): as many splits as the range's
        // length asks for, each with a partial state when there are
        // several or when `keepPartial` (a scaled group merges them all).
        auto addSplits = [&](int32_t begin, int32_t end, bool spanRun,
                             bool keepPartial) {
          const int64_t pages = end - begin;
          // Decode: as many even splits as the length asks for; prompt:
          // the fixed chunks the range meets.
          const int64_t splits =
              decode ? std::max<int64_t>(
                           1, std::min<int64_t>(splitTarget, pages / minPages))
                     : (end - 1 - pageBegin) / promptSplitPages -
                           (begin - pageBegin) / promptSplitPages + 1;
          int32_t splitBegin = begin;
          for (int64_t split = 0; split < splits; ++split) {
            AttentionWorkItem item;
            item.sequence = sequence;
            item.kvHead = kvHead;
            item.firstRow = int32_t(firstRow);
            item.numRows = numRows;
            item.pageBegin = splitBegin;
            item.pageEnd =
                decode ? int32_t(begin + pages * (split + 1) / splits)
                       : std::min(end, pageBegin + ((splitBegin - pageBegin) /
                                                        promptSplitPages +
                                                    1) *
                                                       promptSplitPages);
            splitBegin = item.pageEnd;
            item.partial = keepPartial || splits > 1 ? numPartials++ : -1;
            item.numSplits = 0;
            item.spanPages = spanRun;
            workspace.items.push_back(item);
          }
        };
        const size_t groupFirst = workspace.items.size();
        workspace.groups.push_back(int32_t(groupFirst));
        if (scaled(sequence, pageBegin, visibleEnd)) {
          // Each run of pages of one kind is split on its own, for
          // mergeScaledGroup.
          for (int32_t runBegin = pageBegin; runBegin < visibleEnd;) {
            const bool spanRun = batch.spanPages[runBegin] != 0;
            int32_t runEnd = runBegin + 1;
            while (runEnd < visibleEnd &&
                   (batch.spanPages[runEnd] != 0) == spanRun)
              ++runEnd;
            addSplits(runBegin, runEnd, spanRun, true);
            runBegin = runEnd;
          }
        } else {
          addSplits(pageBegin, visibleEnd, false, false);
        }
        workspace.items[groupFirst].numSplits =
            int32_t(workspace.items.size() - groupFirst);
      }
    }
  }
  return numPartials;
}

/// One call, planned: its work items, their order and page passes (in the
/// workspace), what every pass needs and the call's context. Plain values,
/// so a team can share one thread's plan (copyprivate).
struct PlannedCall : PagedAttentionPlan {
  CallContext context;
};

/// Whether a planned call folds `item` on AMX tiles. Decode steps keep f32
/// products: packing each block into tiles for one query row would cost
/// more than the products save. The choice depends on the sequence alone.
bool foldsOnAmx(const PlannedCall &call, const AttentionWorkItem &item) {
  return call.useAmx && !isDecode(*call.context.batch, item.sequence);
}

/// Whether a planned call folds `item` in decode steps of four pages
/// (foldDecodePagesAvx512): a decode sequence's rows on the AVX-512 path.
bool foldsDecodeSteps(const PlannedCall &call, const AttentionWorkItem &item) {
  return call.useAvx512 && isDecode(*call.context.batch, item.sequence);
}

/// Whether `item` runs in one page pass with the other tiles of its
/// sequence, KV head and key range: every prompt tile on AMX or AVX-512,
/// where the pass packs (AMX), or rotates and widens (AVX-512), each page
/// once for all of its tiles and folds it into each while it is in L1.
bool sharesPagePass(const PlannedCall &call, const AttentionWorkItem &item) {
  return foldsOnAmx(call, item) ||
         (call.useAvx512 && !foldsDecodeSteps(call, item));
}

/// Plans a call that `numThreads` threads will run.
PlannedCall planCall(const PagedAttentionShape &shape,
                     const PagedAttentionBatch &batch, const PagedKvView &kv,
                     const float *queries, const PagedAttentionOptions &options,
                     AttentionWorkspace &workspace, int numThreads) {
  PlannedCall call;
  call.useAvx512 = !options.forceScalar && cpuFeatures().hasAvx512() &&
                   kv.blockSize == 16 && shape.headDim % 16 == 0;
  // A property of the call's shape and storage (and, below, of each
  // sequence's query count): every tile of a sequence takes the same path.
  call.useAmx = call.useAvx512 && options.allowAmx &&
                kv.precision == KvPrecision::F16 && shape.headDim % 32 == 0 &&
                shape.headDim <= kMaxAmxHeadDim && amxBf16Usable();
  const bool useAvx512 = call.useAvx512, useAmx = call.useAmx;
  call.numPartials =
      planWorkItems(shape, batch, options, useAvx512 && !useAmx, workspace);
  call.totalPages = batch.pageOffsets[batch.numSequences];
  call.stateFloats = int64_t(kMaxRows) * (2 + shape.headDim);
  if (workspace.partials.size() < size_t(call.numPartials * call.stateFloats))
    workspace.partials.resize(size_t(call.numPartials * call.stateFloats));
  call.context = CallContext{
      &shape, &kv, &options, &batch, workspace.pageStarts.data(), queries};
  const int64_t numItems = int64_t(workspace.items.size());
  const int32_t totalPages = call.totalPages;

  // The per-thread block cache, for rope-in-kernel prefill tiles whose key
  // range takes several passes (rotating a block costs about a tenth of
  // folding it into a 16-row tile; merely widening f16 once per pass is
  // cheap enough), while it stays affordable (a big batch's pages would
  // not fit the caches anyway). runPass leaves it out of a range's only
  // pass, which rotates each page once anyway.
  bool anyManyRows = false;
  for (const AttentionWorkItem &item : workspace.items)
    anyManyRows |=
        item.numRows > kRowsToWidenBlock && !foldsDecodeSteps(call, item);
  // A call of one item runs on one thread (thread 0's entries).
  if (numItems <= 1)
    numThreads = 1;
  const int64_t entryFloats = int64_t(2) * shape.headDim * 16;
  const int64_t cacheFloats = int64_t(totalPages) * entryFloats;
  call.cacheFloats = cacheFloats;
  // AMX tiles keep packed pairs there, rotated or not.
  const bool useCache = options.useBlockCache && useAvx512 && anyManyRows &&
                        (options.keyRope || useAmx) &&
                        cacheFloats * numThreads <= kMaxBlockCacheFloats;
  if (useCache) {
    // + 16: room to start the entries on a cache line.
    if (workspace.blockCache.size() < size_t(cacheFloats * numThreads + 16))
      workspace.blockCache.resize(size_t(cacheFloats * numThreads + 16));
    workspace.blockCacheTags.assign(size_t(totalPages) * numThreads, 0);
    float *blockCache = workspace.blockCache.data();
    blockCache += (64 - reinterpret_cast<uintptr_t>(blockCache) % 64) % 64 /
                  sizeof(float);
    call.blockCache = blockCache;
    call.blockCacheTags = workspace.blockCacheTags.data();
  }
  std::vector<int32_t> &order = workspace.order;
  order.resize(size_t(numItems));
  for (int64_t index = 0; index < numItems; ++index)
    order[size_t(index)] = int32_t(index);
  // Within a range, the tiles that see the most pages first: the passes
  // cut from it then run heaviest first under the dynamic schedule below,
  // so the call ends on light passes instead of a thread idling while the
  // other folds the last, longest tiles. Ties keep the plan's order;
  // std::sort with the index as the last key, not std::stable_sort, which
  // allocates on every call.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const AttentionWorkItem &x = workspace.items[size_t(a)];
    const AttentionWorkItem &y = workspace.items[size_t(b)];
    return std::tie(x.sequence, x.kvHead, x.pageBegin, y.pageEnd, a) <
           std::tie(y.sequence, y.kvHead, y.pageBegin, x.pageEnd, b);
  });
  // Page passes: runs of `order` that one thread folds together. The
  // tiles of one sequence, KV head and first page that share their pages
  // (sharesPagePass) share a pass, at most kMaxPassTiles, cut into even
  // passes so that there are about two for each thread where the call has
  // few; every other item is a pass of its own.
  std::vector<int32_t> &passes = workspace.passes;
  passes.clear();
  {
    const int64_t target = std::max<int64_t>(1, 2 * numThreads);
    int64_t sharingTiles = 0;
    for (const AttentionWorkItem &item : workspace.items)
      sharingTiles += sharesPagePass(call, item);
    const int64_t tilesPerPass = std::clamp<int64_t>(
        (sharingTiles + target - 1) / target, 1, kMaxPassTiles);
    for (int64_t begin = 0; begin < numItems;) {
      const AttentionWorkItem &first =
          workspace.items[size_t(order[size_t(begin)])];
      int64_t end = begin + 1;
      if (sharesPagePass(call, first))
        while (end < numItems) {
          const AttentionWorkItem &item =
              workspace.items[size_t(order[size_t(end)])];
          if (item.sequence != first.sequence || item.kvHead != first.kvHead ||
              item.pageBegin != first.pageBegin)
            break;
          ++end;
        }
      const int64_t runPasses = (end - begin + tilesPerPass - 1) / tilesPerPass;
      for (int64_t pass = 0; pass < runPasses; ++pass)
        passes.push_back(int32_t(begin + (end - begin) * pass / runPasses));
      begin = end;
    }
    passes.push_back(int32_t(numItems));
  }
  call.numPasses = int64_t(passes.size()) - 1;
  return call;
}

/// Folds page pass `pass` of a planned call on thread `thread` (its block
/// cache entries; 0 where the call has one pass).
void runPass(const PlannedCall &call, AttentionWorkspace &workspace,
             int64_t pass, int thread, float *output) {
  const CallContext &context = call.context;
  float *cache =
      call.blockCache ? call.blockCache + thread * call.cacheFloats : nullptr;
  int32_t *tags = call.blockCache
                      ? call.blockCacheTags + int64_t(thread) * call.totalPages
                      : nullptr;
  const std::vector<int32_t> &order = workspace.order;
  const int32_t begin = workspace.passes[size_t(pass)];
  const int32_t end = workspace.passes[size_t(pass) + 1];
  const AttentionWorkItem &first =
      workspace.items[size_t(order[size_t(begin)])];
  float *partials = workspace.partials.data();
  if (foldsOnAmx(call, first)) {
    const AttentionWorkItem *items[kMaxPassTiles];
    for (int32_t index = begin; index < end; ++index)
      items[index - begin] = &workspace.items[size_t(order[size_t(index)])];
    runPassAmx(context, items, end - begin, partials, output, cache, tags);
    return;
  }
  const bool f16 = context.kv->precision == KvPrecision::F16;
  if (sharesPagePass(call, first)) {
    const AttentionWorkItem *items[kMaxPassTiles];
    for (int32_t index = begin; index < end; ++index)
      items[index - begin] = &workspace.items[size_t(order[size_t(index)])];
    // A pass that is its key range's only one (a hit's few tiles) reads
    // each page once: the block cache would only add its traffic.
    auto sameRange = [&](int64_t other) {
      if (other < 0 || other >= call.numPasses)
        return false;
      const AttentionWorkItem &item =
          workspace
              .items[size_t(order[size_t(workspace.passes[size_t(other)])])];
      return item.sequence == first.sequence && item.kvHead == first.kvHead &&
             item.pageBegin == first.pageBegin;
    };
    if (!sameRange(pass - 1) && !sameRange(pass + 1))
      cache = nullptr, tags = nullptr;
    if (f16)
      runPassAvx512<uint16_t>(context, items, end - begin, partials,
                              call.stateFloats, output, cache, tags);
    else
      runPassAvx512<float>(context, items, end - begin, partials,
                           call.stateFloats, output, cache, tags);
    return;
  }
  for (int32_t index = begin; index < end; ++index) {
    const AttentionWorkItem &item =
        workspace.items[size_t(order[size_t(index)])];
    float *partial = partialOf(partials, call.stateFloats, item);
    const bool decodeSteps = foldsDecodeSteps(call, item);
    if (f16)
      runItem<uint16_t>(context, item, decodeSteps, partial, output);
    else
      runItem<float>(context, item, decodeSteps, partial, output);
  }
}

/// Merges split group `group` of a planned call into its output rows.
void mergeSplitGroup(const PlannedCall &call,
                     const AttentionWorkspace &workspace, int64_t group,
                     float *output) {
  const AttentionWorkItem *first =
      workspace.items.data() + workspace.groups[size_t(group)];
  if (first->partial < 0)
    return;
  bool anySpanPages = false;
  for (int split = 0; split < first->numSplits; ++split)
    anySpanPages |= first[split].spanPages;
  const float *partials = workspace.partials.data();
  if (anySpanPages)
    mergeScaledGroup(call.context, first, partials, output);
  else
    mergeGroup(call.context, first, partials, output);
}

/// The passes, then the merges, of a planned call, shared by the threads of
/// the calling team: work-sharing loops bound to the innermost enclosing
/// region (orphaned), each ending in a barrier.
void runPlannedCall(const PlannedCall &call, AttentionWorkspace &workspace,
                    float *output) {
  const int64_t numPasses = call.numPasses;
#pragma omp for schedule(dynamic, 1)
  for (int64_t pass = 0; pass < numPasses; ++pass)
    runPass(call, workspace, pass, numPasses > 1 ? omp_get_thread_num() : 0,
            output);
  if (call.numPartials == 0)
    return;
  const int64_t numGroups = int64_t(workspace.groups.size());
#pragma omp for schedule(static)
  for (int64_t group = 0; group < numGroups; ++group)
    mergeSplitGroup(call, workspace, group, output);
}

} // namespace

void pagedAttention(const PagedAttentionShape &shape,
                    const PagedAttentionBatch &batch, const PagedKvView &kv,
                    const float *queries, float *output,
                    const PagedAttentionOptions &options,
                    AttentionWorkspace &workspace) {
  const PlannedCall call = planCall(shape, batch, kv, queries, options,
                                    workspace, omp_get_max_threads());
  // One pass and nothing to merge: no threads to wake (and, inside a
  // caller's region, no work-sharing loop bound to its team).
  if (call.numPasses <= 1 && call.numPartials == 0) {
    if (call.numPasses == 1)
      runPass(call, workspace, 0, 0, output);
    return;
  }
#pragma omp parallel
  runPlannedCall(call, workspace, output);
}

void pagedAttentionInTeam(const PagedAttentionShape &shape,
                          const PagedAttentionBatch &batch,
                          const PagedKvView &kv, const float *queries,
                          float *output, const PagedAttentionOptions &options,
                          AttentionWorkspace &workspace) {
  // One thread plans and hands the plan to the others.
  PlannedCall call;
#pragma omp single copyprivate(call)
  call = planCall(shape, batch, kv, queries, options, workspace,
                  omp_get_num_threads());
  runPlannedCall(call, workspace, output);
}

PagedAttentionPlan planPagedAttention(const PagedAttentionShape &shape,
                                      const PagedAttentionBatch &batch,
                                      const PagedKvView &kv,
                                      const PagedAttentionOptions &options,
                                      AttentionWorkspace &workspace,
                                      int numThreads) {
  // Without the block cache: its entries hold one call's (one layer's)
  // K/V. A step that plans once has a few rows per sequence, one tile per
  // KV head, which the cache would not spare any packing.
  PagedAttentionOptions oneTimeBlocks = options;
  oneTimeBlocks.useBlockCache = false;
  return planCall(shape, batch, kv, nullptr, oneTimeBlocks, workspace,
                  numThreads);
}

void pagedAttentionPlannedInTeam(const PagedAttentionPlan &plan,
                                 const PagedAttentionShape &shape,
                                 const PagedAttentionBatch &batch,
                                 const PagedKvView &kv, const float *queries,
                                 float *output,
                                 const PagedAttentionOptions &options,
                                 AttentionWorkspace &workspace) {
  // Each thread builds the call from its own arguments: no hand-over.
  assert(!plan.blockCache && "planPagedAttention plans without the cache");
  PlannedCall call;
  static_cast<PagedAttentionPlan &>(call) = plan;
  call.context = CallContext{
      &shape, &kv, &options, &batch, workspace.pageStarts.data(), queries};
  runPlannedCall(call, workspace, output);
}

} // namespace spanc::cpu
