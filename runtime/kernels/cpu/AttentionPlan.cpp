//===- AttentionPlan.cpp - Cutting an attention call into page passes -----===//
//
// The driver's first half (Attention.cpp runs the plan): each sequence's
// rows cut into tiles, each tile's visible pages into fixed key ranges
// (work items and their split groups), the items ordered so that the tiles
// of one key range run back to back, grouped into page passes, and the
// per-thread block cache sized for the passes that read through it.
// docs/ARCHITECTURE.md, "CPU attention".
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"
#include "runtime/kernels/cpu/CpuFeatures.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace spanc::cpu::attention {

namespace {

/// The most floats the per-thread block caches may take together (256 MiB;
/// a 16k-token prompt takes 8 MiB per thread with head dim 64).
constexpr int64_t kMaxBlockCacheFloats = int64_t(64) << 20;

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

} // namespace

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
  const CpuFeatures &features = cpuFeatures();
  call.useAvx2 = !call.useAvx512 && !options.forceScalar && features.avx2 &&
                 features.fma && features.f16c && kv.blockSize == 16 &&
                 shape.headDim % 8 == 0;
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

  // A call of one item runs on one thread (thread 0's entries).
  if (numItems <= 1)
    numThreads = 1;
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
  std::vector<uint8_t> &cachedPasses = workspace.passUsesBlockCache;
  passes.clear();
  cachedPasses.clear();
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
      // The block cache serves every AMX pass (packed pairs, rotated or
      // not), and the rope-in-kernel AVX-512 passes of a range cut into
      // several.
      const bool cached =
          foldsOnAmx(call, first) ||
          (sharesPagePass(call, first) && options.keyRope && runPasses > 1);
      for (int64_t pass = 0; pass < runPasses; ++pass) {
        passes.push_back(int32_t(begin + (end - begin) * pass / runPasses));
        cachedPasses.push_back(cached);
      }
      begin = end;
    }
    passes.push_back(int32_t(numItems));
  }
  call.numPasses = int64_t(passes.size()) - 1;

  // The per-thread block cache, for rope-in-kernel prefill tiles whose key
  // range takes several passes (rotating a block costs about a tenth of
  // folding it into a 16-row tile; merely widening f16 once per pass is
  // cheap enough; a range's only pass rotates each page once anyway) and
  // for AMX passes, while it stays affordable (a big batch's pages would
  // not fit the caches anyway). A call none of whose passes read through
  // it (a span hit's: a few tiles a key range) neither sizes nor clears it.
  bool anyManyRows = false;
  for (const AttentionWorkItem &item : workspace.items)
    anyManyRows |=
        item.numRows > kRowsToWidenBlock && !foldsDecodeSteps(call, item);
  const bool anyCachedPass = std::find(cachedPasses.begin(), cachedPasses.end(),
                                       1) != cachedPasses.end();
  const int64_t entryFloats = int64_t(2) * shape.headDim * 16;
  const int64_t cacheFloats = int64_t(totalPages) * entryFloats;
  call.cacheFloats = cacheFloats;
  const bool useCache = options.useBlockCache && useAvx512 && anyManyRows &&
                        anyCachedPass &&
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
  return call;
}

} // namespace spanc::cpu::attention
