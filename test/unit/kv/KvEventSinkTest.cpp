//===- KvEventSinkTest.cpp - The cache's store/remove reports replay it ---===//

#include "runtime/kv/KvCacheManager.h"

#include "llvm/ADT/DenseMap.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

using namespace spanc::kv;

namespace {

constexpr unsigned BlockSize = 16;

/// Keeps what a subscriber would: the live set and every stored record.
struct RecordingSink : KvEventSink {
  struct Record {
    BlockHash hash, parent;
    bool parentIsRoot;
    SegmentKind kind;
    std::vector<TokenId> tokens;
  };
  std::vector<Record> stored;
  llvm::DenseMap<BlockHash, unsigned> live;
  unsigned removedUnknown = 0, storedTwice = 0, numRemoved = 0;

  void blockStored(const StoredBlock &block) override {
    stored.push_back({block.hash, block.parent, block.parentIsRoot, block.kind,
                      block.tokens.vec()});
    storedTwice += !live.try_emplace(block.hash, 1).second;
  }
  void blockRemoved(const BlockHash &hash) override {
    ++numRemoved;
    removedUnknown += !live.erase(hash);
  }
};

std::vector<TokenId> tokens(int count, TokenId first) {
  std::vector<TokenId> result(static_cast<size_t>(count));
  std::iota(result.begin(), result.end(), first);
  return result;
}

/// Runs one call: admit, plan, prefill, `generate` decode tokens, release.
/// Returns false (leaving nothing admitted) when it did not fit now.
bool runCall(KvCacheManager &manager, RequestId id,
             llvm::ArrayRef<Segment> segments, int generate) {
  AdmitResult result = manager.admit(id, segments);
  if (result.status != AdmitStatus::Admitted)
    return false;
  auto step = manager.planStep();
  EXPECT_TRUE(bool(step)) << llvm::toString(step.takeError());
  manager.finishStep(*step);
  manager.commitPrefill(id);
  for (int i = 0; i < generate; ++i) {
    auto slot = manager.appendToken(id, TokenId(50000 + i));
    if (!slot) {
      llvm::consumeError(slot.takeError());
      break;
    }
  }
  manager.release(id);
  return true;
}

/// Stored minus removed is exactly the pool's hash index, and every
/// stored block's hash chains from the parent it was reported with.
void expectReplaysPool(const RecordingSink &sink, const BlockPool &pool,
                       const BlockHasher &hasher) {
  EXPECT_EQ(sink.removedUnknown, 0u);
  EXPECT_EQ(sink.storedTwice, 0u);
  EXPECT_EQ(sink.live.size(), pool.numCachedBlocks());
  for (const auto &entry : sink.live)
    EXPECT_TRUE(pool.lookup(entry.first).has_value());
  for (const RecordingSink::Record &record : sink.stored) {
    EXPECT_EQ(record.parentIsRoot, record.parent == hasher.root());
    ASSERT_FALSE(record.tokens.empty());
    ASSERT_LE(record.tokens.size(), BlockSize);
    EXPECT_EQ(hasher.hashBlock(record.parent, record.tokens), record.hash);
  }
}

/// A RAG-shaped call: a shared system prefix, `numSpans` of the documents
/// in a shuffled order, a question tail.
std::vector<Segment> ragCall(std::mt19937 &random, int numSpans) {
  std::vector<int> documents = {0, 1, 2, 3, 4, 5};
  std::shuffle(documents.begin(), documents.end(), random);
  std::vector<Segment> segments;
  segments.push_back({SegmentKind::Prefix, tokens(21, 1)});
  for (int i = 0; i < numSpans; ++i)
    segments.push_back({SegmentKind::Span, tokens(37 + 5 * documents[i],
                                                  1000 * (documents[i] + 1))});
  segments.push_back(
      {SegmentKind::Tail, tokens(9, 20000 + int(random() % 1000))});
  return segments;
}

void replayUnderLoad(CacheMode cacheMode, RelocationMode relocation,
                     const SpanOptions &spanOptions, uint32_t numBlocks) {
  BlockPool pool(numBlocks, BlockSize);
  RecordingSink sink;
  pool.setEventSink(&sink);
  BlockHasher hasher("smollm2-test");
  KvCacheManager manager(pool, hasher, cacheMode, relocation, spanOptions);
  std::mt19937 random(7);
  int admitted = 0;
  for (RequestId id = 1; id <= 40; ++id)
    admitted +=
        runCall(manager, id, ragCall(random, 2 + int(id % 3)), int(id % 20));
  EXPECT_GT(admitted, 30);
  expectReplaysPool(sink, pool, hasher);
  bool sawSpan = false;
  for (const RecordingSink::Record &record : sink.stored)
    sawSpan |= record.kind == SegmentKind::Span;
  EXPECT_EQ(sawSpan, cacheMode == CacheMode::Span);
  if (numBlocks < 100)
    EXPECT_GT(sink.numRemoved, 0u);
  else
    EXPECT_EQ(pool.numEvictions(), 0u);
}

} // namespace

TEST(KvEventSink, StoredMinusRemovedIsThePoolWithRoomToSpare) {
  replayUnderLoad(CacheMode::Span, RelocationMode::RopeInKernel, SpanOptions(),
                  4096);
}

TEST(KvEventSink, StoredMinusRemovedIsThePoolUnderEviction) {
  // 40 blocks hold about two calls: most of the stream is evictions.
  replayUnderLoad(CacheMode::Span, RelocationMode::RopeInKernel, SpanOptions(),
                  40);
}

TEST(KvEventSink, StoredMinusRemovedIsThePoolWithRerope) {
  // ReRoPE rotates blocks in place: a moved block leaves the index.
  replayUnderLoad(CacheMode::Span, RelocationMode::Rerope, SpanOptions(), 64);
}

TEST(KvEventSink, PrefixCacheReportsOnlyPrefixChains) {
  replayUnderLoad(CacheMode::Prefix, RelocationMode::RopeInKernel,
                  SpanOptions(), 64);
}

TEST(KvEventSink, IsolatedSpansChainFromTheRoot) {
  BlockPool pool(256, BlockSize);
  RecordingSink sink;
  pool.setEventSink(&sink);
  BlockHasher hasher("smollm2-test");
  KvCacheManager manager(pool, hasher, CacheMode::Span,
                         RelocationMode::RopeInKernel,
                         SpanOptions{SpanContext::Isolated, 0, 0});
  std::vector<Segment> call = {{SegmentKind::Prefix, tokens(20, 1)},
                               {SegmentKind::Span, tokens(40, 1000)},
                               {SegmentKind::Tail, tokens(5, 9000)}};
  ASSERT_TRUE(runCall(manager, 1, call, 0));
  expectReplaysPool(sink, pool, hasher);
  // The span's first block starts a chain of its own at the root, so a
  // consumer keyed by parent sees it apart from the prefix.
  unsigned spanRoots = 0;
  for (const RecordingSink::Record &record : sink.stored)
    spanRoots += record.kind == SegmentKind::Span && record.parentIsRoot;
  EXPECT_EQ(spanRoots, 1u);
}

TEST(KvEventSink, NoSinkNoReports) {
  BlockPool pool(8, BlockSize);
  EXPECT_EQ(pool.eventSink(), nullptr);
  KvCacheManager manager(pool, BlockHasher("m"), CacheMode::Span,
                         RelocationMode::RopeInKernel);
  std::vector<Segment> call = {{SegmentKind::Prefix, tokens(40, 1)}};
  EXPECT_TRUE(runCall(manager, 1, call, 3));
  EXPECT_GT(pool.numCachedBlocks(), 0u);
}
