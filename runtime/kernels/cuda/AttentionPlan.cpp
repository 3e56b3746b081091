//===- AttentionPlan.cpp - How a paged attention call is cut into blocks --===//

#include "runtime/kernels/cuda/AttentionPlan.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

namespace spanc::cuda {

namespace {

Status planError(const std::string &message) {
  return Status::failure("paged attention: " + message);
}

Status sequenceError(int sequence, const std::string &message) {
  return planError("sequence " + std::to_string(sequence) + ": " + message);
}

/// Appends `count` words from `data`; returns where they start.
size_t appendWords(std::vector<int32_t> &words, const void *data,
                   size_t count) {
  const size_t offset = words.size();
  words.resize(offset + count);
  if (count)
    std::memcpy(words.data() + offset, data, count * sizeof(int32_t));
  return offset;
}

static_assert(sizeof(AttentionWorkItem) == 8 * sizeof(int32_t),
              "work items are packed as 8 words");
static_assert(sizeof(AttentionMergeGroup) == 2 * sizeof(int32_t),
              "merge groups are packed as 2 words");

} // namespace

void packAttentionPlan(const AttentionPlan &plan,
                       const PagedAttentionBatch &batch,
                       PackedAttentionPlan &packed) {
  std::vector<int32_t> &words = packed.words;
  words.clear();
  const size_t numSequences = size_t(std::max(0, batch.numSequences));
  const size_t numPages = size_t(plan.numPages);
  packed.queryOffsets = packed.pageOffsets = packed.blockIds =
      packed.validTokens = 0;
  if (numSequences > 0) {
    packed.queryOffsets =
        appendWords(words, batch.queryOffsets, numSequences + 1);
    packed.pageOffsets =
        appendWords(words, batch.pageOffsets, numSequences + 1);
    packed.blockIds = appendWords(words, batch.blockIds, numPages);
    packed.validTokens = appendWords(words, batch.validTokens, numPages);
  }
  packed.pageStarts =
      appendWords(words, plan.pageStarts.data(), plan.pageStarts.size());
  packed.items = appendWords(words, plan.items.data(), plan.items.size() * 8);
  packed.merges =
      appendWords(words, plan.merges.data(), plan.merges.size() * 2);
}

int64_t attentionSharedBytes(int headDim, int blockSize, int tileRows) {
  // The tile's queries, K and V of one block, scores (the accumulators
  // live in registers).
  const int64_t floats = int64_t(tileRows) * headDim +
                         2 * int64_t(headDim) * blockSize +
                         int64_t(tileRows) * blockSize;
  return floats * int64_t(sizeof(float));
}

int attentionRangePages(int64_t numPages, int minPages) {
  const int64_t spread =
      (numPages + kAttentionMaxRanges - 1) / kAttentionMaxRanges;
  return int(std::max<int64_t>(std::max(1, minPages), spread));
}

Status buildAttentionPlan(const PagedAttentionShape &shape,
                          const PagedAttentionBatch &batch, int blockSize,
                          const AttentionPlanOptions &options,
                          AttentionPlan &plan) {
  plan = AttentionPlan();
  if (shape.numKvHeads <= 0 || shape.numQueryHeads <= 0 ||
      shape.numQueryHeads % shape.numKvHeads != 0)
    return planError(std::to_string(shape.numQueryHeads) +
                     " query heads are not a multiple of " +
                     std::to_string(shape.numKvHeads) + " KV heads");
  if (shape.headDim <= 0 || shape.headDim > kernels::kMaxHeadDim)
    return planError("head dim " + std::to_string(shape.headDim) +
                     " outside [1, " + std::to_string(kernels::kMaxHeadDim) +
                     "]");
  if (blockSize <= 0 || blockSize > kernels::kMaxBlockSize)
    return planError("block size " + std::to_string(blockSize) +
                     " outside [1, " + std::to_string(kernels::kMaxBlockSize) +
                     "]");
  if (batch.numSequences < 0)
    return planError("a negative number of sequences");
  const int tileRows = attentionTileRows(shape.headDim);
  plan.tileRows = tileRows;
  if (batch.numSequences == 0)
    return Status::success();
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const int minPages =
      options.minPagesPerRange > 0 ? options.minPagesPerRange : 8;
  const int32_t numPages = batch.pageOffsets[batch.numSequences];
  plan.numPages = numPages;
  plan.numQueryRows = batch.queryOffsets[batch.numSequences];
  plan.pageStarts.resize(size_t(std::max(0, numPages)));

  // Every tile first, unsplit; then the split decision over all of them.
  for (int sequence = 0; sequence < batch.numSequences; ++sequence) {
    const int32_t pageBegin = batch.pageOffsets[sequence];
    const int32_t pageEnd = batch.pageOffsets[sequence + 1];
    const int64_t numQueries = int64_t(batch.queryOffsets[sequence + 1]) -
                               batch.queryOffsets[sequence];
    if (pageEnd < pageBegin || numQueries < 0)
      return sequenceError(sequence, "offsets go backwards");
    int64_t length = 0;
    for (int32_t page = pageBegin; page < pageEnd; ++page) {
      const int valid = batch.validTokens[page];
      if (valid < 0 || valid > blockSize)
        return sequenceError(sequence, "page " + std::to_string(page) +
                                           " has " + std::to_string(valid) +
                                           " valid tokens (block size " +
                                           std::to_string(blockSize) + ")");
      if (batch.blockIds[page] < 0)
        return sequenceError(sequence,
                             "page " + std::to_string(page) + " has block id " +
                                 std::to_string(batch.blockIds[page]));
      plan.pageStarts[size_t(page)] = int32_t(length);
      length += valid;
    }
    if (numQueries > length)
      return sequenceError(sequence,
                           std::to_string(numQueries) + " queries but " +
                               std::to_string(length) + " valid tokens");
    if (numQueries == 0)
      continue;
    // The page list's length alone fixes the ranges (a hit's tail and the
    // full prompt see the same list).
    const int rangePages = attentionRangePages(pageEnd - pageBegin, minPages);
    const int64_t rows = numQueries * groupSize;
    // Tiles in row order: the visible pages only grow, so one pass over the
    // pages serves every tile (a long prefill has thousands of each).
    int32_t visibleEnd = pageBegin;
    for (int64_t firstRow = 0; firstRow < rows; firstRow += tileRows) {
      const int numRows = int(std::min<int64_t>(tileRows, rows - firstRow));
      // The tile's last row sees the most; pages past its limit are
      // invisible to every row of the tile.
      const int64_t lastLimit =
          length - numQueries + (firstRow + numRows - 1) / groupSize;
      while (visibleEnd < pageEnd &&
             plan.pageStarts[size_t(visibleEnd)] <= lastLimit)
        ++visibleEnd;
      for (int kvHead = 0; kvHead < shape.numKvHeads; ++kvHead) {
        AttentionWorkItem item;
        item.sequence = sequence;
        item.kvHead = kvHead;
        item.firstRow = int32_t(firstRow);
        item.numRows = numRows;
        item.pageBegin = pageBegin;
        item.pageEnd = visibleEnd;
        item.rangePages = rangePages;
        plan.items.push_back(item);
      }
    }
  }

  // Split the tiles of several ranges when that is affordable: a step of
  // few tiles (decode, a short tail after a long cached context) then
  // fills the GPU; a big prefill has tiles enough without.
  auto rangesOf = [](const AttentionWorkItem &item) {
    return (int64_t(item.pageEnd) - item.pageBegin + item.rangePages - 1) /
           item.rangePages;
  };
  int64_t splitStates = 0;
  for (const AttentionWorkItem &item : plan.items)
    if (rangesOf(item) > 1)
      splitStates += rangesOf(item);
  const bool split = options.splitting == AttentionSplitting::Always ||
                     (options.splitting == AttentionSplitting::Auto &&
                      splitStates <= kAttentionMaxPartialStates);
  if (!split || splitStates == 0)
    return Status::success();
  std::vector<AttentionWorkItem> tiles;
  tiles.swap(plan.items);
  for (const AttentionWorkItem &tile : tiles) {
    const int64_t ranges = rangesOf(tile);
    if (ranges <= 1) {
      plan.items.push_back(tile);
      continue;
    }
    plan.merges.push_back({int32_t(plan.items.size()), int32_t(ranges)});
    for (int64_t range = 0; range < ranges; ++range) {
      AttentionWorkItem item = tile;
      item.pageBegin = int32_t(tile.pageBegin + range * tile.rangePages);
      item.pageEnd = int32_t(
          std::min<int64_t>(tile.pageEnd, item.pageBegin + tile.rangePages));
      if (plan.numPartialFloats > int64_t(INT32_MAX))
        return planError("the split states overflow 32-bit offsets");
      item.partial = int32_t(plan.numPartialFloats);
      plan.numPartialFloats +=
          attentionStateFloats(tile.numRows, shape.headDim);
      plan.items.push_back(item);
    }
  }
  return Status::success();
}

} // namespace spanc::cuda
