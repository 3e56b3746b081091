//===- Attention.cpp - Paged causal attention on the CPU ------------------===//
//
// A tile is up to kMaxRows query rows (token x head-in-group pairs) of one
// sequence and KV head. For each visible page the tile computes its scores
// against the block's (up to 16) keys, folds them into per-row online
// softmax states (running max, running sum, accumulator), and never
// materializes a score row; everything is computed in f32 (the AMX path:
// bf16 high/low products, f32 sums).
//
// This file and AttentionPlan.cpp are the driver: the plan cuts a call
// into work items (a tile of rows against a range of its pages) and page
// passes; this file sets up each tile, hands its pages to one tile step
// and merges split tiles. The tile steps, one file per
// instruction set, fold blocks into the tile state:
//   AttentionScalar.cpp  any shape; the reference the others are tested
//                        against;
//   AttentionAvx2.cpp    CPUs with AVX2 but no AVX-512: blockSize 16 and
//                        headDim % 8 == 0;
//   AttentionAvx512.cpp  blockSize 16 and headDim % 16 == 0;
//   AttentionAmx.cpp     f16 K/V on a CPU with AMX: every tile of a
//                        sequence of prompt rows (decode rows stay in f32).
// Every path keeps a row's result independent of the other rows of its
// tile and of what shares the call.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Attention.h"

#include "runtime/kernels/cpu/AttentionInternal.h"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace spanc::cpu {

using namespace attention;

namespace {

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
             bool decodeAvx512, float *partial, float *output) {
  TileState tile;
  setUpTile(context, item, /*byDim=*/false, tile);
  if (decodeAvx512)
    foldDecodePagesAvx512<Element>(context, item, tile);
  else
    foldPagesScalar<Element>(context, item, tile);
  finishItem(context, item, tile, partial, output);
}

/// This thread's tile states for an AVX-512 or AVX2 page pass
/// (kMaxPassTiles of ~64 KiB: more than an OpenMP thread's stack should
/// hold).
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

/// Runs the AVX2 items of one page pass together (foldPassAvx2).
template <typename Element>
void runPassAvx2(const CallContext &context,
                 const AttentionWorkItem *const *items, int count,
                 float *partials, int64_t stateFloats, float *output) {
  TileState *states = passTileStates();
  TileState *tiles[kMaxPassTiles];
  for (int index = 0; index < count; ++index) {
    tiles[index] = &states[index];
    setUpTile(context, *items[index], /*byDim=*/false, *tiles[index]);
  }
  foldPassAvx2<Element>(context, items, tiles, count);
  for (int index = 0; index < count; ++index)
    finishItem(context, *items[index], *tiles[index],
               partialOf(partials, stateFloats, *items[index]), output);
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

/// Folds page pass `pass` of a planned call on thread `thread` (its block
/// cache entries; 0 where the call has one pass).
void runPass(const PlannedCall &call, AttentionWorkspace &workspace,
             int64_t pass, int thread, float *output) {
  const CallContext &context = call.context;
  // A key range's only AVX-512 pass (a hit's few tiles) reads each page
  // once: the block cache would only add its traffic (planCall).
  const bool cached =
      call.blockCache && workspace.passUsesBlockCache[size_t(pass)];
  float *cache = cached ? call.blockCache + thread * call.cacheFloats : nullptr;
  int32_t *tags = cached
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
    if (call.useAvx2 && f16)
      runPassAvx2<uint16_t>(context, items, end - begin, partials,
                            call.stateFloats, output);
    else if (call.useAvx2)
      runPassAvx2<float>(context, items, end - begin, partials,
                         call.stateFloats, output);
    else if (f16)
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
    const bool decodeAvx512 = foldsDecodeSteps(call, item);
    if (f16)
      runItem<uint16_t>(context, item, decodeAvx512, partial, output);
    else
      runItem<float>(context, item, decodeAvx512, partial, output);
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
