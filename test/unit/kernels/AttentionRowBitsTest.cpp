//===- AttentionRowBitsTest.cpp - A row's bits are its own ----------------===//
//
// The executor needs a span-cache hit to give the miss's bits: a row of
// paged attention must round the same whatever shares its tile, its call,
// its page pass or its sequence, and a prompt's tail must give the bits of
// the same rows inside the whole prompt. These tests run each kernel path
// (the target runs once per path, bazel/isa.bzl) on rows alone and in
// company and compare the bits; AttentionTest holds the results to a
// reference.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/CpuFeatures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace spanc;
using namespace spanc::cpu;

/// A page list that every sequence of a case shares.
struct PageList {
  std::vector<int32_t> blockIds;
  std::vector<int32_t> validTokens;
};

/// The shape of every case here: SmolLM2's heads (9 query, 3 KV), head dim
/// 64, blocks of 16.
constexpr int kQueryHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlockSize = 16;
constexpr int64_t kRowWidth = int64_t(kQueryHeads) * kHeadDim;

RopeConfig ropeConfig() {
  RopeConfig config;
  config.headDim = config.rotaryDim = kHeadDim;
  config.theta = 10000.0f;
  return config;
}

/// One layer of `numBlocks` blocks with random K/V in every slot, the RoPE
/// table of `ropePositions` positions, and the random queries of `length`
/// logical tokens (token t's query is the same in every call of a seed).
struct RandomKv {
  RandomKv(KvPrecision precision, bool ropeInKernel, int64_t numBlocks,
           int length, unsigned seed, int64_t ropePositions)
      : rope(ropeConfig(), ropePositions) {
    backend::KvStorageConfig config;
    config.precision = precision;
    config.numLayers = 1;
    config.numKvHeads = kKvHeads;
    config.headDim = kHeadDim;
    config.blockSize = kBlockSize;
    config.numBlocks = numBlocks;
    config.keysRotated = !ropeInKernel;
    auto created = backend::KvStorage::create(config);
    EXPECT_TRUE(bool(created)) << llvm::toString(created.takeError());
    storage = std::move(*created);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> key(kKvHeads * kHeadDim), value(key.size());
    for (int64_t block = 0; block < numBlocks; ++block)
      for (int slot = 0; slot < kBlockSize; ++slot) {
        for (size_t index = 0; index < key.size(); ++index) {
          key[index] = normal(rng);
          value[index] = normal(rng);
        }
        storage->writeToken(0, block, slot, key.data(), value.data());
      }
    tokenQueries.resize(size_t(length * kRowWidth));
    for (float &x : tokenQueries)
      x = normal(rng);
  }

  /// Runs `batch` on the host's path; returns each sequence's output rows.
  std::vector<std::vector<float>> run(const PagedAttentionBatch &batch,
                                      const float *queries,
                                      PagedAttentionOptions options,
                                      bool ropeInKernel) const {
    PagedAttentionShape shape;
    shape.numQueryHeads = kQueryHeads;
    shape.numKvHeads = kKvHeads;
    shape.headDim = kHeadDim;
    shape.scale = 1.0f / std::sqrt(float(kHeadDim));
    shape.queryRowStride = shape.outputRowStride = kRowWidth;
    options.keyRope = ropeInKernel ? &rope : nullptr;
    const int32_t rows = batch.queryOffsets[batch.numSequences];
    std::vector<float> output(size_t(rows * kRowWidth), 0.0f);
    AttentionWorkspace workspace;
    pagedAttention(shape, batch, storage->layerView(0), queries, output.data(),
                   options, workspace);
    std::vector<std::vector<float>> result;
    for (int sequence = 0; sequence < batch.numSequences; ++sequence)
      result.emplace_back(
          output.begin() + batch.queryOffsets[sequence] * kRowWidth,
          output.begin() + batch.queryOffsets[sequence + 1] * kRowWidth);
    return result;
  }

  std::unique_ptr<backend::KvStorage> storage;
  RopeTable rope;
  std::vector<float> tokenQueries;
};

/// The logical tokens of a page list.
int lengthOf(const PageList &pages) {
  int length = 0;
  for (int valid : pages.validTokens)
    length += valid;
  return length;
}

/// Ten pages scattered over the pool, two of them partial mid-list (9 and
/// 3 valid slots) and the last partial: 131 tokens.
PageList tenPagesTwoPartial() {
  PageList pages;
  pages.blockIds = {3, 17, 8, 21, 5, 30, 12, 1, 25, 9};
  pages.validTokens = {16, 16, 9, 16, 16, 3, 16, 16, 16, 11};
  return pages;
}

/// Runs the AVX-512 path (scalar where the CPU lacks it) on sequences that
/// all share `pages` of one random storage, sequence s asking for its last
/// numQueries[s] tokens; returns each sequence's output rows, without key
/// splits so a row's arithmetic depends on its pages only.
std::vector<std::vector<float>>
runTails(KvPrecision precision, bool allowAmx, bool ropeInKernel,
         const PageList &pages, const std::vector<int> &numQueries,
         bool useBlockCache = true, std::vector<uint8_t> decodeRows = {}) {
  const RandomKv kv(precision, ropeInKernel, 40, lengthOf(pages), 99, 1024);
  std::vector<int32_t> queryOffsets = {0}, pageOffsets = {0}, blockIds,
                       validTokens;
  std::vector<float> queries;
  for (int count : numQueries) {
    queryOffsets.push_back(queryOffsets.back() + count);
    pageOffsets.push_back(pageOffsets.back() + int32_t(pages.blockIds.size()));
    blockIds.insert(blockIds.end(), pages.blockIds.begin(),
                    pages.blockIds.end());
    validTokens.insert(validTokens.end(), pages.validTokens.begin(),
                       pages.validTokens.end());
    queries.insert(queries.end(), kv.tokenQueries.end() - count * kRowWidth,
                   kv.tokenQueries.end());
  }
  PagedAttentionBatch batch;
  batch.numSequences = int(numQueries.size());
  batch.queryOffsets = queryOffsets.data();
  batch.pageOffsets = pageOffsets.data();
  batch.blockIds = blockIds.data();
  batch.validTokens = validTokens.data();
  // Prompt rows unless told (RowKind::Prompt: a hit's tail is prompt rows).
  decodeRows.resize(numQueries.size(), 0);
  batch.decodeSequences = decodeRows.data();
  PagedAttentionOptions options;
  options.minPagesPerSplit = 1000;
  options.allowAmx = allowAmx;
  options.useBlockCache = useBlockCache;
  return kv.run(batch, queries.data(), options, ropeInKernel);
}

TEST(PagedAttention, RowResultsDoNotDependOnTheTile) {
  // A span-cache hit computes a prompt's last tokens in a short tail (few
  // rows: decode-size tiles of one row per head) where a miss computes them
  // inside full 16-row tiles among other tokens and sequences; the
  // executor needs the same bits either way, so each row's arithmetic must
  // not depend on its tile's size, neighbours or lane.
  const PageList pages = tenPagesTwoPartial();
  const int length = lengthOf(pages);
  for (KvPrecision precision : {KvPrecision::F32, KvPrecision::F16})
    for (bool allowAmx : {false, true})
      for (bool rope : {false, true}) {
        SCOPED_TRACE(
            std::string(precision == KvPrecision::F16 ? "f16" : "f32") +
            (allowAmx ? ", amx allowed" : "") +
            (rope ? ", rope-in-kernel" : ", rotated K"));
        // One call: the whole prompt, then tails of 1, 2, 5, 7 and 28
        // tokens (3 to 84 rows per KV head: 84 makes five 16-row tiles and
        // a 4-row one, which share their page pass) sharing the call.
        const std::vector<int> counts = {length, 1, 2, 5, 7, 28};
        auto together = runTails(precision, allowAmx, rope, pages, counts);
        // Folded without the block cache: the AMX path's page passes (up
        // to kMaxPassTiles tiles of one KV head, each ending at its own
        // page) pack each step once for all of their tiles instead.
        EXPECT_EQ(together, runTails(precision, allowAmx, rope, pages, counts,
                                     /*useBlockCache=*/false));
        for (size_t index = 1; index < counts.size(); ++index) {
          // The same tail alone in its call.
          auto alone =
              runTails(precision, allowAmx, rope, pages, {counts[index]});
          const std::vector<float> &full = together[0];
          const std::vector<float> &tail = together[index];
          ASSERT_EQ(tail.size(), alone[0].size());
          EXPECT_EQ(0, std::memcmp(tail.data(), alone[0].data(),
                                   tail.size() * sizeof(float)))
              << "tail of " << counts[index] << " alone vs in a batch";
          EXPECT_EQ(0, std::memcmp(tail.data(),
                                   full.data() + full.size() - tail.size(),
                                   tail.size() * sizeof(float)))
              << "tail of " << counts[index]
              << " vs the same rows in the prompt";
        }
      }
}

TEST(PagedAttention, PagePassesFoldEachTileAsAlone) {
  // A long prompt's tiles end at their own pages (causal), several steps of
  // four pages apart: a page pass keeps each tile's last step until it is
  // folded, whether the pages come from the block cache or from the pass's
  // own two step buffers.
  PageList pages;
  for (int page = 0; page < 36; ++page) {
    pages.blockIds.push_back((page * 7) % 40);
    pages.validTokens.push_back(page % 5 == 3 ? 9 : 16);
  }
  const int length = lengthOf(pages);
  for (bool rope : {false, true}) {
    SCOPED_TRACE(rope ? "rope-in-kernel" : "rotated K");
    const std::vector<int> counts = {length, 3};
    auto cached = runTails(KvPrecision::F16, true, rope, pages, counts);
    auto uncached = runTails(KvPrecision::F16, true, rope, pages, counts,
                             /*useBlockCache=*/false);
    EXPECT_EQ(cached, uncached);
    EXPECT_EQ(cached[1], runTails(KvPrecision::F16, true, rope, pages, {3},
                                  /*useBlockCache=*/false)[0]);
  }
}

/// A sequence of runIndexed: the first `numPages` pages of the shared list
/// and the logical indices of its query tokens (increasing).
struct IndexedSequence {
  int numPages = 0;
  std::vector<int32_t> indices;
};

/// Runs the host's path on sequences over prefixes of `pages` (one random
/// storage), each asking for the tokens at `indices` of its page list
/// (passed as PagedAttentionBatch::queryIndices when `explicitIndices`,
/// else they must be its last tokens); prompt tiles split every
/// `splitPages` pages. Returns each sequence's output rows.
std::vector<std::vector<float>>
runIndexed(KvPrecision precision, bool allowAmx, bool ropeInKernel,
           const PageList &pages, const std::vector<IndexedSequence> &sequences,
           bool explicitIndices, int splitPages) {
  const RandomKv kv(precision, ropeInKernel, 96, lengthOf(pages), 7, 2048);
  std::vector<int32_t> queryOffsets = {0}, pageOffsets = {0}, blockIds,
                       validTokens, indices;
  std::vector<float> queries;
  for (const IndexedSequence &sequence : sequences) {
    queryOffsets.push_back(queryOffsets.back() +
                           int32_t(sequence.indices.size()));
    pageOffsets.push_back(pageOffsets.back() + sequence.numPages);
    blockIds.insert(blockIds.end(), pages.blockIds.begin(),
                    pages.blockIds.begin() + sequence.numPages);
    validTokens.insert(validTokens.end(), pages.validTokens.begin(),
                       pages.validTokens.begin() + sequence.numPages);
    indices.insert(indices.end(), sequence.indices.begin(),
                   sequence.indices.end());
    for (int32_t index : sequence.indices)
      queries.insert(queries.end(), kv.tokenQueries.begin() + index * kRowWidth,
                     kv.tokenQueries.begin() + (index + 1) * kRowWidth);
  }
  PagedAttentionBatch batch;
  batch.numSequences = int(sequences.size());
  batch.queryOffsets = queryOffsets.data();
  batch.pageOffsets = pageOffsets.data();
  batch.blockIds = blockIds.data();
  batch.validTokens = validTokens.data();
  batch.queryIndices = explicitIndices ? indices.data() : nullptr;
  PagedAttentionOptions options;
  options.allowAmx = allowAmx;
  options.promptSplitPages = splitPages;
  return kv.run(batch, queries.data(), options, ropeInKernel);
}

/// The logical indices [first, first + count).
std::vector<int32_t> indexRange(int32_t first, int32_t count) {
  std::vector<int32_t> indices(static_cast<size_t>(count));
  for (int32_t index = 0; index < count; ++index)
    indices[size_t(index)] = first + index;
  return indices;
}

TEST(PagedAttention, RunsMergedByQueryIndicesGiveEachRowItsOwnBits) {
  // A span hit's recomputed end blocks and its tail read prefixes of one
  // page list; run as one sequence with query indices, every row must give
  // the bits it gives in a sequence of its own, and those of the same
  // token inside a whole prompt, whatever the key splits (prompt tiles
  // split in fixed chunks of the page list, so long lists split too).
  PageList pages;
  for (int page = 0; page < 90; ++page) {
    pages.blockIds.push_back((page * 37 + 5) % 96);
    pages.validTokens.push_back(page % 7 == 3 ? 5 : 16);
  }
  std::vector<int32_t> starts = {0};
  for (int valid : pages.validTokens)
    starts.push_back(starts.back() + valid);
  // Three runs: 3 tokens ending page 30, 2 ending page 61, 17 ending page 90.
  const std::vector<IndexedSequence> alone = {
      {30, indexRange(starts[30] - 3, 3)},
      {61, indexRange(starts[61] - 2, 2)},
      {90, indexRange(starts[90] - 17, 17)}};
  IndexedSequence merged{90, {}};
  for (const IndexedSequence &run : alone)
    merged.indices.insert(merged.indices.end(), run.indices.begin(),
                          run.indices.end());
  for (KvPrecision precision : {KvPrecision::F32, KvPrecision::F16})
    for (bool rope : {false, true})
      for (int splitPages : {0, 8}) {
        SCOPED_TRACE(
            std::string(precision == KvPrecision::F16 ? "f16" : "f32") +
            (rope ? ", rope-in-kernel" : ", rotated K") + ", split pages " +
            std::to_string(splitPages));
        auto separate =
            runIndexed(precision, true, rope, pages, alone, false, splitPages);
        auto together = runIndexed(precision, true, rope, pages, {merged}, true,
                                   splitPages);
        auto whole =
            runIndexed(precision, true, rope, pages,
                       {{90, indexRange(0, starts[90])}}, false, splitPages);
        const size_t width = together[0].size() / merged.indices.size();
        size_t offset = 0;
        for (size_t run = 0; run < alone.size(); ++run) {
          ASSERT_EQ(separate[run].size(), alone[run].indices.size() * width);
          EXPECT_EQ(0, std::memcmp(separate[run].data(),
                                   together[0].data() + offset,
                                   separate[run].size() * sizeof(float)))
              << "run " << run << " alone vs merged";
          EXPECT_EQ(0, std::memcmp(separate[run].data(),
                                   whole[0].data() +
                                       size_t(alone[run].indices[0]) * width,
                                   separate[run].size() * sizeof(float)))
              << "run " << run << " alone vs inside the whole prompt";
          offset += separate[run].size();
        }
      }
}

TEST(PagedAttention, DecodeRowsAreTheirOwnWhateverSharesTheirCall) {
  // A generated token's rows (RowKind::Decode) fold their pages four at a
  // time with f32 products: not the bits of the same token as a prompt row,
  // but their own whatever shares the call. Ten pages, two of them partial
  // mid-list, end in a step of two.
  const PageList pages = tenPagesTwoPartial();
  const int length = lengthOf(pages);
  for (KvPrecision precision : {KvPrecision::F32, KvPrecision::F16})
    for (bool rope : {false, true}) {
      SCOPED_TRACE(std::string(precision == KvPrecision::F16 ? "f16" : "f32") +
                   (rope ? ", rope-in-kernel" : ", rotated K"));
      const std::vector<int> counts = {length, 1, 5};
      auto together =
          runTails(precision, true, rope, pages, counts, true, {0, 1, 0});
      auto alone = runTails(precision, true, rope, pages, {1}, true, {1});
      ASSERT_EQ(together[1].size(), alone[0].size());
      EXPECT_EQ(0, std::memcmp(together[1].data(), alone[0].data(),
                               alone[0].size() * sizeof(float)));
      // The same token as a prompt row (checked against the reference in
      // AttentionTest): outputs of order one, apart by the roundings of
      // another softmax grouping, or the AMX path's bf16 weights (2^-8).
      const std::vector<float> &full = together[0];
      const float *promptRow = full.data() + full.size() - alone[0].size();
      const bool amxRuns = precision == KvPrecision::F16 && amxBf16Usable();
      const float bound = amxRuns ? 0x1p-6f : 1e-5f;
      for (size_t index = 0; index < alone[0].size(); ++index)
        EXPECT_NEAR(alone[0][index], promptRow[index], bound) << index;
    }
}

} // namespace
