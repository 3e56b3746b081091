//===- KvCacheManagerTest.cpp - Block tables, hashes, hits, page lists ----===//

#include "runtime/kv/KvCacheManager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

using namespace spanc::kv;

namespace {

constexpr unsigned BlockSize = 16;

#define ASSERT_POOL_OK(pool)                                                   \
  do {                                                                         \
    llvm::Error error = (pool).verify();                                       \
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));             \
  } while (0)

std::vector<TokenId> tokens(int count, TokenId first) {
  std::vector<TokenId> result(static_cast<size_t>(count));
  std::iota(result.begin(), result.end(), first);
  return result;
}

Segment prefix(std::vector<TokenId> ids) {
  return {SegmentKind::Prefix, std::move(ids)};
}
Segment span(std::vector<TokenId> ids) {
  return {SegmentKind::Span, std::move(ids)};
}
Segment tail(std::vector<TokenId> ids) {
  return {SegmentKind::Tail, std::move(ids)};
}

/// Admits, runs the step's relocation planning, and "computes" the prefill.
void run(KvCacheManager &manager, RequestId id,
         llvm::ArrayRef<Segment> segments) {
  AdmitResult result = manager.admit(id, segments);
  ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
  auto step = manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  manager.finishStep(*step);
  manager.commitPrefill(id);
}

llvm::SmallVector<BlockHash, 8> segmentHashes(const RequestPlan &plan,
                                              uint32_t segment) {
  llvm::SmallVector<BlockHash, 8> hashes;
  const SegmentPlan &segmentPlan = plan.segments[segment];
  for (uint32_t i = 0; i < segmentPlan.numBlocks; ++i)
    hashes.push_back(plan.blocks[segmentPlan.firstBlock + i].hash);
  return hashes;
}

uint32_t reusedBlocks(const RequestPlan &plan, uint32_t segment) {
  const SegmentPlan &segmentPlan = plan.segments[segment];
  uint32_t count = 0;
  for (uint32_t i = 0; i < segmentPlan.numBlocks; ++i)
    count += plan.blocks[segmentPlan.firstBlock + i].reused;
  return count;
}

/// Isolated spans unless told otherwise: most tests here pin the block
/// mechanics of spans that hash from the root; SpanContext::Prefix has its
/// own tests below.
const SpanOptions Isolated{SpanContext::Isolated, 0, 0};

struct Fixture {
  BlockPool pool;
  KvCacheManager manager;
  Fixture(uint32_t numBlocks, CacheMode cacheMode,
          RelocationMode relocation = RelocationMode::Rerope,
          const SpanOptions &spanOptions = Isolated)
      : pool(numBlocks, BlockSize),
        manager(pool, BlockHasher("smollm2-test"), cacheMode, relocation,
                spanOptions) {}
};

TEST(KvCacheManager, SameSpanHashesTheSameAtOffsets16And48) {
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> document = tokens(40, 1000);
  run(fixture.manager, 1, {prefix(tokens(16, 1)), span(document), tail({5})});
  run(fixture.manager, 2, {prefix(tokens(48, 1)), span(document), tail({5})});
  const RequestPlan &at16 = fixture.manager.plan(1);
  const RequestPlan &at48 = fixture.manager.plan(2);
  EXPECT_EQ(at16.segments[1].firstPosition, 16);
  EXPECT_EQ(at48.segments[1].firstPosition, 48);
  EXPECT_EQ(segmentHashes(at16, 1), segmentHashes(at48, 1));
  // ... so the second request reuses all three span blocks (the last one
  // partial: 8 tokens), at its own offset.
  EXPECT_EQ(reusedBlocks(at48, 1), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const LogicalBlock &block = at48.blocks[at48.segments[1].firstBlock + i];
    EXPECT_EQ(block.position, 48 + 16 * i);
    EXPECT_EQ(fixture.pool.storedPosition(block.block), block.position);
  }
  // The tails follow different contexts.
  EXPECT_NE(segmentHashes(at16, 2), segmentHashes(at48, 2));
}

TEST(KvCacheManager, TailAfterABDiffersFromTailAfterBA) {
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> a = tokens(20, 100), b = tokens(33, 200);
  std::vector<TokenId> question = tokens(7, 900);
  run(fixture.manager, 1,
      {prefix(tokens(5, 1)), span(a), span(b), tail(question)});
  run(fixture.manager, 2,
      {prefix(tokens(5, 1)), span(b), span(a), tail(question)});
  const RequestPlan &ab = fixture.manager.plan(1);
  const RequestPlan &ba = fixture.manager.plan(2);
  EXPECT_NE(segmentHashes(ab, 3), segmentHashes(ba, 3));
  EXPECT_EQ(reusedBlocks(ba, 3), 0u) << "the tail attended to other inputs";
  // Every span block of BA was reused from AB (c: AB then BA).
  EXPECT_EQ(reusedBlocks(ba, 1), ba.segments[1].numBlocks);
  EXPECT_EQ(reusedBlocks(ba, 2), ba.segments[2].numBlocks);
  EXPECT_EQ(reusedBlocks(ba, 0), 1u);
  // The same order again hits everything but the last block (the tail's
  // only one), which is always computed: it yields the first token's logits.
  run(fixture.manager, 3,
      {prefix(tokens(5, 1)), span(b), span(a), tail(question)});
  const RequestPlan &again = fixture.manager.plan(3);
  EXPECT_EQ(again.numReusedTokens, again.numPromptTokens - question.size());
  ASSERT_EQ(again.runs.size(), 1u);
  EXPECT_EQ(again.runs[0].segment, 3u);
  EXPECT_EQ(again.runs[0].numTokens, question.size());
}

TEST(KvCacheManager, PrefixHashChangesWhenAnyEarlierTokenChanges) {
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> text = tokens(50, 1);
  run(fixture.manager, 1, {prefix(text)});
  text[20] = 7777; // in the second block
  run(fixture.manager, 2, {prefix(text)});
  const RequestPlan &plan = fixture.manager.plan(2);
  ASSERT_EQ(plan.blocks.size(), 4u);
  EXPECT_TRUE(plan.blocks[0].reused);
  for (int i = 1; i < 4; ++i)
    EXPECT_FALSE(plan.blocks[i].reused) << i;
  ASSERT_EQ(plan.runs.size(), 1u);
  EXPECT_EQ(plan.runs[0].firstBlock, 1u);
  EXPECT_EQ(plan.runs[0].numTokens, 34u);
  EXPECT_EQ(plan.runs[0].firstPosition, 16);
}

TEST(KvCacheManager, ModelIdChangesEveryHash) {
  BlockPool pool(16, BlockSize);
  KvCacheManager first(pool, BlockHasher("a"), CacheMode::Span,
                       RelocationMode::Rerope);
  KvCacheManager second(pool, BlockHasher("b"), CacheMode::Span,
                        RelocationMode::Rerope);
  std::vector<Segment> segments = {span(tokens(20, 3)), tail({1, 2})};
  run(first, 1, segments);
  run(second, 2, segments);
  for (size_t i = 0; i < first.plan(1).blocks.size(); ++i) {
    EXPECT_NE(first.plan(1).blocks[i].hash, second.plan(2).blocks[i].hash);
    EXPECT_FALSE(second.plan(2).blocks[i].reused);
  }
}

TEST(KvCacheManager, PageListsFollowSegmentVisibility) {
  Fixture fixture(64, CacheMode::Span);
  // prefix 5 tokens (1 block), span A 20 (2 blocks), span B 16 (1 block),
  // tail 3 (1 block).
  ASSERT_EQ(fixture.manager
                .admit(1, {prefix(tokens(5, 1)), span(tokens(20, 100)),
                           span(tokens(16, 200)), tail(tokens(3, 300))})
                .status,
            AdmitStatus::Admitted);
  const RequestPlan &plan = fixture.manager.plan(1);
  ASSERT_EQ(plan.blocks.size(), 5u);
  using Pages = llvm::SmallVector<uint32_t, 16>;
  EXPECT_EQ(plan.segments[0].pages, (Pages{0}));
  EXPECT_EQ(plan.segments[1].pages, (Pages{1, 2}));
  EXPECT_EQ(plan.segments[2].pages, (Pages{3}));
  EXPECT_EQ(plan.segments[3].pages, (Pages{0, 1, 2, 3, 4}));
  // Padding takes no position: A starts right after the 5 prefix tokens.
  int64_t expected[] = {0, 5, 21, 25, 41};
  uint32_t valid[] = {5, 16, 4, 16, 3};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(plan.blocks[i].position, expected[i]) << i;
    EXPECT_EQ(plan.blocks[i].numTokens, valid[i]) << i;
  }
  EXPECT_EQ(plan.nextPosition, 44);
  // One run per segment (nothing cached); the tail's run sees all pages
  // and its queries sit at logical index 41 of its page list.
  ASSERT_EQ(plan.runs.size(), 4u);
  EXPECT_EQ(plan.runs[1].numPages, 2u);
  EXPECT_EQ(plan.runs[1].firstLogicalIndex, 0);
  EXPECT_EQ(plan.runs[1].firstPosition, 5);
  EXPECT_EQ(plan.runs[3].numPages, 5u);
  EXPECT_EQ(plan.runs[3].firstLogicalIndex, 41);
  EXPECT_EQ(plan.runs[3].firstPosition, 41);
  // Physical blocks are distinct.
  llvm::DenseSet<BlockId> physical;
  for (const LogicalBlock &block : plan.blocks)
    EXPECT_TRUE(physical.insert(block.block).second);
}

TEST(KvCacheManager, ReusedSpanIsRelocatedToItsNewOffset) {
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> a = tokens(20, 100), b = tokens(33, 200);
  run(fixture.manager, 1, {prefix({1}), span(a), span(b), tail({9})});
  fixture.manager.release(1);
  ASSERT_EQ(fixture.manager.admit(2, {prefix({1}), span(b), span(a), tail({9})})
                .status,
            AdmitStatus::Admitted);
  auto step = fixture.manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  // Nobody else reads the blocks: all five span blocks turn in place, in
  // one pass.
  EXPECT_EQ(step->relocation.numInPlace, 5u);
  EXPECT_EQ(step->relocation.numCopies, 0u);
  ASSERT_EQ(step->relocation.batches.size(), 1u);
  const RequestPlan &plan = fixture.manager.plan(2);
  for (const LogicalBlock &block : plan.blocks) {
    if (block.reused) {
      EXPECT_EQ(fixture.pool.storedPosition(block.block), block.position);
    }
  }
  // b now at 1, a at 34.
  EXPECT_EQ(plan.segments[1].firstPosition, 1);
  EXPECT_EQ(plan.segments[2].firstPosition, 34);
  fixture.manager.finishStep(*step);
}

TEST(KvCacheManager, ConcurrentUsesOfOneSpanAtTwoOffsetsGetTwoCopies) {
  // The reference implementation's defect: two requests of the same step
  // reuse one cached span at different offsets.
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> document = tokens(32, 500);
  run(fixture.manager, 1, {span(document), tail({1})});
  fixture.manager.release(1);
  ASSERT_EQ(fixture.manager
                .admit(2, {prefix(tokens(16, 1)), span(document), tail({2})})
                .status,
            AdmitStatus::Admitted);
  ASSERT_EQ(fixture.manager
                .admit(3, {prefix(tokens(48, 1)), span(document), tail({3})})
                .status,
            AdmitStatus::Admitted);
  auto step = fixture.manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  EXPECT_EQ(step->relocation.numCopies, 2u);
  EXPECT_EQ(step->relocation.numInPlace, 2u);
  const RequestPlan &first = fixture.manager.plan(2);
  const RequestPlan &second = fixture.manager.plan(3);
  for (uint32_t i = 0; i < 2; ++i) {
    const LogicalBlock &x = first.blocks[first.segments[1].firstBlock + i];
    const LogicalBlock &y = second.blocks[second.segments[1].firstBlock + i];
    EXPECT_TRUE(x.reused && y.reused);
    EXPECT_NE(x.block, y.block);
    EXPECT_EQ(fixture.pool.storedPosition(x.block), 16 + 16 * i);
    EXPECT_EQ(fixture.pool.storedPosition(y.block), 48 + 16 * i);
  }
  fixture.manager.finishStep(*step);
  // A third request in a later step wants the span at 16 again, while
  // request 2 still reads it there: no work at all.
  ASSERT_EQ(fixture.manager
                .admit(4, {prefix(tokens(16, 1)), span(document), tail({4})})
                .status,
            AdmitStatus::Admitted);
  auto later = fixture.manager.planStep();
  ASSERT_TRUE(bool(later));
  EXPECT_TRUE(later->relocation.empty());
  ASSERT_POOL_OK(fixture.pool);
}

TEST(KvCacheManager, RopeInKernelNeverRelocates) {
  Fixture fixture(64, CacheMode::Span, RelocationMode::RopeInKernel);
  std::vector<TokenId> document = tokens(32, 500);
  run(fixture.manager, 1, {span(document), tail({1})});
  ASSERT_EQ(fixture.manager
                .admit(2, {prefix(tokens(16, 1)), span(document), tail({2})})
                .status,
            AdmitStatus::Admitted);
  auto step = fixture.manager.planStep();
  ASSERT_TRUE(bool(step));
  EXPECT_TRUE(step->relocation.empty());
  const RequestPlan &plan = fixture.manager.plan(2);
  EXPECT_EQ(plan.blocks[1].block, fixture.manager.plan(1).blocks[0].block);
}

TEST(KvCacheManager, PrefixModeIgnoresSpans) {
  Fixture fixture(64, CacheMode::Prefix);
  std::vector<TokenId> a = tokens(20, 100), b = tokens(20, 200);
  run(fixture.manager, 1, {prefix({1, 2, 3}), span(a), span(b), tail({9})});
  const RequestPlan &first = fixture.manager.plan(1);
  ASSERT_EQ(first.segments.size(), 1u);
  EXPECT_EQ(first.blocks.size(), 3u); // 44 tokens, no padding
  EXPECT_EQ(first.segments[0].pages.size(), 3u);
  // Same tokens: all hit but the last block (always computed). Spans
  // swapped: only the first block (tokens 1,2,3 and a[0..12]) survives.
  run(fixture.manager, 2, {prefix({1, 2, 3}), span(a), span(b), tail({9})});
  EXPECT_EQ(fixture.manager.plan(2).numReusedTokens, 32u);
  run(fixture.manager, 3, {prefix({1, 2, 3}), span(b), span(a), tail({9})});
  EXPECT_EQ(fixture.manager.plan(3).numReusedTokens, 0u);
  run(fixture.manager, 4, {prefix({1, 2, 3}), span(a), span(b), tail({8})});
  EXPECT_EQ(fixture.manager.plan(4).numReusedTokens, 32u);
}

TEST(KvCacheManager, OffModeNeverReuses) {
  Fixture fixture(64, CacheMode::Off);
  std::vector<Segment> segments = {prefix(tokens(40, 1))};
  run(fixture.manager, 1, segments);
  fixture.manager.release(1);
  run(fixture.manager, 2, segments);
  EXPECT_EQ(fixture.manager.plan(2).numReusedTokens, 0u);
  EXPECT_EQ(fixture.pool.numCachedBlocks(), 0u);
}

TEST(KvCacheManager, WaitsOrRejectsWithoutLeavingState) {
  Fixture fixture(6, CacheMode::Span);
  // 7 blocks can never fit in 6.
  AdmitResult tooBig = fixture.manager.admit(1, {prefix(tokens(100, 1))});
  EXPECT_EQ(tooBig.status, AdmitStatus::Reject);
  EXPECT_NE(tooBig.reason.find("needs 7 blocks"), std::string::npos)
      << tooBig.reason;
  EXPECT_FALSE(fixture.manager.contains(1));
  run(fixture.manager, 2, {prefix(tokens(64, 1))}); // 4 blocks held
  AdmitResult busy = fixture.manager.admit(3, {prefix(tokens(40, 500))});
  EXPECT_EQ(busy.status, AdmitStatus::Wait);
  EXPECT_NE(busy.reason.find("needs 3 new blocks, 2 can be freed"),
            std::string::npos)
      << busy.reason;
  EXPECT_FALSE(fixture.manager.contains(3));
  EXPECT_EQ(fixture.pool.numFreeBlocks(), 2u);
  for (const LogicalBlock &block : fixture.manager.plan(2).blocks)
    EXPECT_EQ(fixture.pool.refCount(block.block), 1u);
  ASSERT_POOL_OK(fixture.pool);
  // Once request 2 finishes, request 3 fits by evicting its blocks.
  fixture.manager.release(2);
  run(fixture.manager, 3, {prefix(tokens(40, 500))});
  EXPECT_GE(fixture.pool.numEvictions(), 1u);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(KvCacheManager, RejectsMalformedSegmentLists) {
  Fixture fixture(16, CacheMode::Span);
  struct Case {
    std::vector<Segment> segments;
    const char *reason;
  } cases[] = {
      {{}, "no segments"},
      {{prefix({1}), span({}), tail({2})}, "segment 1 (span) has no tokens"},
      {{span({1}), prefix({2})}, "segment 1 is a prefix"},
      {{prefix({1}), span({2})}, "the last segment (1) is a span"},
  };
  for (const Case &c : cases) {
    AdmitResult result = fixture.manager.admit(9, c.segments);
    EXPECT_EQ(result.status, AdmitStatus::Reject);
    EXPECT_NE(result.reason.find(c.reason), std::string::npos) << result.reason;
  }
  EXPECT_EQ(fixture.pool.numFreeBlocks(), 16u);
}

TEST(KvCacheManager, GeneratedTokensExtendTheTailAndAreCachedAtRelease) {
  Fixture fixture(64, CacheMode::Span);
  std::vector<TokenId> prompt = tokens(20, 1);
  run(fixture.manager, 1, {prefix(prompt)});
  // The prompt's partial block (4 tokens) is cached, so the first append
  // copies it before writing.
  auto first = fixture.manager.appendToken(1, 700);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  ASSERT_TRUE(first->copy.has_value());
  EXPECT_EQ(first->slot, 4u);
  EXPECT_EQ(first->position, 20);
  EXPECT_EQ(first->copy->destination, first->block);
  std::vector<TokenId> generated = {700};
  for (TokenId token = 701; token < 730; ++token) {
    auto slot = fixture.manager.appendToken(1, token);
    ASSERT_TRUE(bool(slot));
    EXPECT_FALSE(slot->copy.has_value());
    generated.push_back(token);
  }
  const RequestPlan &plan = fixture.manager.plan(1);
  EXPECT_EQ(plan.nextPosition, 50);
  EXPECT_EQ(plan.blocks.size(), 4u);
  EXPECT_EQ(plan.segments[0].pages.size(), 4u);
  EXPECT_EQ(plan.blocks.back().numTokens, 2u);
  fixture.manager.release(1);
  EXPECT_EQ(fixture.pool.numFreeBlocks(), 64u);
  // An outer call that consumes prompt + generated tokens as a span (the
  // plus-distribute rewrite) finds every block the inner call left behind.
  std::vector<TokenId> both = prompt;
  both.insert(both.end(), generated.begin(), generated.end());
  run(fixture.manager, 2, {prefix(tokens(3, 900)), span(both), tail({5})});
  EXPECT_EQ(reusedBlocks(fixture.manager.plan(2), 1), 4u);
  // The prompt alone hits all but its last block, which a call always
  // computes (the partial block was reused inside the span above).
  run(fixture.manager, 3, {prefix(prompt)});
  EXPECT_EQ(fixture.manager.plan(3).numReusedTokens, 16u);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(KvCacheManager, EvictionUnderPressureKeepsRunningRequestsIntact) {
  // A cache 4x too small for the workload: every request still gets
  // consistent blocks (never one held by another running request).
  Fixture fixture(12, CacheMode::Span);
  llvm::SmallVector<std::vector<TokenId>, 8> documents;
  for (int i = 0; i < 8; ++i)
    documents.push_back(tokens(32, 1000 * (i + 1)));
  for (RequestId id = 1; id <= 24; ++id) {
    const auto &a = documents[id % 8], &b = documents[(id * 3) % 8];
    std::vector<Segment> segments = {span(a), span(b), tail({int(id)})};
    AdmitResult result = fixture.manager.admit(id, segments);
    ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
    auto step = fixture.manager.planStep();
    ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
    fixture.manager.finishStep(*step);
    fixture.manager.commitPrefill(id);
    // Every block of this request: referenced, positioned as the request
    // needs it, and holding the right number of tokens.
    for (const LogicalBlock &block : fixture.manager.plan(id).blocks) {
      EXPECT_GE(fixture.pool.refCount(block.block), 1u);
      EXPECT_EQ(fixture.pool.storedPosition(block.block), block.position);
      EXPECT_EQ(fixture.pool.numTokens(block.block), block.numTokens);
    }
    fixture.manager.release(id);
    ASSERT_POOL_OK(fixture.pool);
  }
  EXPECT_GT(fixture.pool.numEvictions(), 0u);
}

TEST(KvCacheManager, StepDefersTheNewestRequestWhenCopiesDoNotFit) {
  Fixture fixture(6, CacheMode::Span);
  std::vector<TokenId> document = tokens(32, 500);
  run(fixture.manager, 1, {span(document), tail({1})}); // 3 blocks, running
  // Request 2 reuses the span at offset 16 while request 1 reads it at 0:
  // it needs 2 new blocks at admission and 2 copies at planStep, 4 > 3.
  ASSERT_EQ(fixture.manager
                .admit(2, {prefix(tokens(16, 1)), span(document), tail({2})})
                .status,
            AdmitStatus::Admitted);
  EXPECT_EQ(fixture.pool.numFreeBlocks(), 1u);
  auto step = fixture.manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  ASSERT_EQ(step->deferred.size(), 1u);
  EXPECT_EQ(step->deferred[0], 2u);
  EXPECT_FALSE(fixture.manager.contains(2));
  EXPECT_TRUE(step->relocation.empty());
  EXPECT_EQ(fixture.pool.numFreeBlocks(), 3u);
  ASSERT_POOL_OK(fixture.pool);
  // After request 1 finishes, request 2 runs (the span turns in place).
  fixture.manager.release(1);
  run(fixture.manager, 2, {prefix(tokens(16, 1)), span(document), tail({2})});
  EXPECT_EQ(reusedBlocks(fixture.manager.plan(2), 1), 2u);
}

} // namespace

namespace {

TEST(KvCacheManagerOptions, ParseModesAndNameBadValues) {
  auto span = parseCacheMode("span");
  ASSERT_TRUE(bool(span));
  EXPECT_EQ(*span, CacheMode::Span);
  auto prefixMode = parseCacheMode("prefix");
  ASSERT_TRUE(bool(prefixMode));
  EXPECT_EQ(*prefixMode, CacheMode::Prefix);
  auto off = parseCacheMode("off");
  ASSERT_TRUE(bool(off));
  EXPECT_EQ(*off, CacheMode::Off);
  auto bad = parseCacheMode("spans");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("--cache 'spans'"),
            std::string::npos);
  auto rerope = parseRelocationMode("rerope");
  ASSERT_TRUE(bool(rerope));
  EXPECT_EQ(*rerope, RelocationMode::Rerope);
  auto inKernel = parseRelocationMode("rope-in-kernel");
  ASSERT_TRUE(bool(inKernel));
  EXPECT_EQ(*inKernel, RelocationMode::RopeInKernel);
  auto wrong = parseRelocationMode("rope");
  ASSERT_FALSE(bool(wrong));
  EXPECT_NE(llvm::toString(wrong.takeError()).find("--relocation 'rope'"),
            std::string::npos);
}

} // namespace

namespace {

TEST(LayoutRequest, NeedsNoPoolAndChainsParents) {
  BlockHasher hasher("m");
  auto plan = layoutRequest(
      {prefix(tokens(5, 1)), span(tokens(20, 100)), tail(tokens(3, 300))},
      CacheMode::Span, Isolated, BlockSize, hasher);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->segments.size(), 3u);
  EXPECT_EQ(plan->segments[0].parentHash, hasher.root());
  EXPECT_EQ(plan->segments[1].parentHash, hasher.root());
  // The tail chains from join(prefix's last hash, span's last hash).
  EXPECT_EQ(plan->segments[2].parentHash,
            hasher.join(plan->blocks[0].hash, plan->blocks[2].hash));
  for (const LogicalBlock &block : plan->blocks)
    EXPECT_EQ(block.block, InvalidBlock);
  auto bad = layoutRequest({tail({1}), prefix({2})}, CacheMode::Span, Isolated,
                           BlockSize, hasher);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("segment 1 is a prefix"),
            std::string::npos);
}

} // namespace

namespace {

/// Every block reference the pool counts belongs to exactly one slot of a
/// live request's table, and every running request reads each block at the
/// position its K is stored at.
void expectConsistent(const BlockPool &pool, const KvCacheManager &manager,
                      llvm::ArrayRef<RequestId> live, bool stepped) {
  std::vector<uint32_t> references(pool.numBlocks(), 0);
  for (RequestId id : live)
    for (const LogicalBlock &block : manager.plan(id).blocks) {
      ASSERT_NE(block.block, InvalidBlock);
      ++references[block.block];
      if (stepped) {
        ASSERT_EQ(pool.storedPosition(block.block), block.position)
            << "request " << id;
      }
      ASSERT_EQ(pool.numTokens(block.block), block.numTokens)
          << "request " << id;
    }
  for (BlockId block = 0; block < pool.numBlocks(); ++block)
    ASSERT_EQ(pool.refCount(block), references[block]) << "block " << block;
  llvm::Error error = pool.verify();
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

TEST(KvCacheManager, RandomWorkloadKeepsExactReferenceCounts) {
  for (CacheMode mode : {CacheMode::Span, CacheMode::Prefix}) {
    BlockPool pool(40, BlockSize);
    KvCacheManager manager(pool, BlockHasher("m"), mode, RelocationMode::Rerope,
                           Isolated);
    std::mt19937 random(mode == CacheMode::Span ? 11 : 12);
    llvm::SmallVector<std::vector<TokenId>, 6> spans;
    for (int i = 0; i < 6; ++i)
      spans.push_back(tokens(5 + 9 * i, 1000 * (i + 1)));
    std::vector<RequestId> live;
    RequestId nextId = 1;
    // What the run went through, so the test cannot pass vacuously.
    unsigned numWaits = 0, numCopies = 0, numInPlace = 0, numAppends = 0,
             numCopyOnWrite = 0, numReused = 0;
    for (int round = 0; round < 300; ++round) {
      // Admit up to three requests of random shape in this step.
      int admissions = int(random() % 4);
      std::vector<RequestId> admitted;
      for (int i = 0; i < admissions; ++i) {
        std::vector<Segment> segments;
        if (random() % 2)
          segments.push_back(prefix(tokens(1 + random() % 20, 1)));
        int numSpans = int(random() % 4);
        for (int s = 0; s < numSpans; ++s)
          segments.push_back(span(spans[random() % spans.size()]));
        segments.push_back(tail(tokens(1 + random() % 6, 500)));
        RequestId id = nextId++;
        AdmitResult result = manager.admit(id, segments);
        if (result.status == AdmitStatus::Admitted) {
          admitted.push_back(id);
          numReused += manager.plan(id).numReusedTokens;
        } else {
          numWaits += result.status == AdmitStatus::Wait;
          ASSERT_FALSE(manager.contains(id)) << result.reason;
        }
      }
      live.insert(live.end(), admitted.begin(), admitted.end());
      ASSERT_NO_FATAL_FAILURE(expectConsistent(pool, manager, live, false));
      auto step = manager.planStep();
      ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
      for (RequestId id : step->deferred)
        live.erase(std::find(live.begin(), live.end(), id));
      for (RequestId id : step->deferred)
        admitted.erase(std::find(admitted.begin(), admitted.end(), id));
      numCopies += step->relocation.numCopies;
      numInPlace += step->relocation.numInPlace;
      manager.finishStep(*step);
      for (RequestId id : admitted)
        manager.commitPrefill(id);
      // Decode a few tokens for some running requests.
      for (RequestId id : live) {
        if (random() % 3)
          continue;
        auto slot = manager.appendToken(id, TokenId(random() % 50));
        if (!slot) {
          llvm::consumeError(slot.takeError()); // cache full: fine here
          continue;
        }
        ++numAppends;
        numCopyOnWrite += slot->copy.has_value();
      }
      ASSERT_NO_FATAL_FAILURE(expectConsistent(pool, manager, live, true));
      // Finish some.
      for (size_t i = 0; i < live.size();) {
        if (random() % 3 == 0) {
          manager.release(live[i]);
          live.erase(live.begin() + long(i));
        } else {
          ++i;
        }
      }
      ASSERT_NO_FATAL_FAILURE(expectConsistent(pool, manager, live, true));
    }
    for (RequestId id : live)
      manager.release(id);
    EXPECT_EQ(pool.numFreeBlocks(), pool.numBlocks());
    EXPECT_GT(numWaits, 0u);
    EXPECT_GT(numAppends, 0u);
    EXPECT_GT(numCopyOnWrite, 0u);
    EXPECT_GT(numReused, 0u);
    if (mode == CacheMode::Span) {
      EXPECT_GT(numCopies, 0u);
      EXPECT_GT(numInPlace, 0u);
    }
    std::printf("%s: waits %u, copies %u, in place %u, appends %u (%u copied "
                "on write), reused tokens %u, evictions %llu\n",
                mode == CacheMode::Span ? "span" : "prefix", numWaits,
                numCopies, numInPlace, numAppends, numCopyOnWrite, numReused,
                static_cast<unsigned long long>(pool.numEvictions()));
  }
}

} // namespace

namespace {

TEST(LayoutRequest, PrintsSegmentsBlocksAndPages) {
  BlockHasher hasher("m");
  auto plan = layoutRequest(
      {prefix(tokens(5, 1)), span(tokens(20, 100)), tail(tokens(3, 300))},
      CacheMode::Span, Isolated, BlockSize, hasher);
  ASSERT_TRUE(bool(plan));
  std::string text;
  llvm::raw_string_ostream os(text);
  printRequestPlan(os, *plan);
  os.flush();
  EXPECT_NE(text.find("segment 1 span: tokens [5, 25) positions [5, 25) "
                      "blocks [1, 3) context segments [0, 0) parent " +
                      hasher.root().str()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  block 2: 4 tokens at positions [21, 25) hash " +
                      plan->blocks[2].hash.str()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  pages: 0 1 2 3\n"), std::string::npos) << text;
}

} // namespace

namespace {

TEST(KvCacheManager, BlocksInFlightAreSeenUntilCommitted) {
  Fixture fixture(64, CacheMode::Span);
  KvCacheManager &manager = fixture.manager;
  std::vector<TokenId> document = tokens(40, 1000);
  std::vector<Segment> first = {prefix(tokens(16, 1)), span(document),
                                tail({5})};
  // The same span at another offset, and a request sharing nothing.
  std::vector<Segment> shifted = {prefix(tokens(48, 100)), span(document),
                                  tail({6})};
  std::vector<Segment> unrelated = {prefix(tokens(20, 500)),
                                    span(tokens(40, 3000)), tail({7})};
  EXPECT_FALSE(manager.needsBlocksInFlight(shifted));
  ASSERT_EQ(manager.admit(1, first).status, AdmitStatus::Admitted);
  EXPECT_TRUE(manager.needsBlocksInFlight(shifted));
  EXPECT_FALSE(manager.needsBlocksInFlight(unrelated));
  auto step = manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  manager.finishStep(*step);
  EXPECT_TRUE(manager.needsBlocksInFlight(shifted)); // still computing
  manager.commitPrefill(1);
  EXPECT_FALSE(manager.needsBlocksInFlight(shifted)); // now a hit
  ASSERT_EQ(manager.admit(2, shifted).status, AdmitStatus::Admitted);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 1), 3u);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(KvCacheManager, ReleasingAnUncommittedRequestClearsItsBlocksInFlight) {
  Fixture fixture(64, CacheMode::Prefix);
  std::vector<Segment> prompt = {prefix(tokens(64, 1)), tail({5})};
  ASSERT_EQ(fixture.manager.admit(1, prompt).status, AdmitStatus::Admitted);
  EXPECT_TRUE(fixture.manager.needsBlocksInFlight(prompt));
  fixture.manager.release(1); // preempted before its prefill ran
  EXPECT_FALSE(fixture.manager.needsBlocksInFlight(prompt));
  ASSERT_POOL_OK(fixture.pool);
}

TEST(KvCacheManager, NothingIsInFlightWithoutACache) {
  Fixture fixture(64, CacheMode::Off);
  std::vector<Segment> prompt = {prefix(tokens(64, 1)), tail({5})};
  ASSERT_EQ(fixture.manager.admit(1, prompt).status, AdmitStatus::Admitted);
  EXPECT_FALSE(fixture.manager.needsBlocksInFlight(prompt));
}

} // namespace

namespace {

// SpanContext::Prefix: spans read the context before their plus.

const SpanOptions PrefixContext{SpanContext::Prefix, 0, 0};

TEST(SpanContextPrefix, SpansChainFromTheirPrefixAndReadItsPages) {
  BlockHasher hasher("m");
  auto plan = layoutRequest({prefix(tokens(20, 1)), span(tokens(20, 100)),
                             span(tokens(5, 200)), tail(tokens(3, 300))},
                            CacheMode::Span, PrefixContext, BlockSize, hasher);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->segments.size(), 4u);
  // Prefix blocks 0-1, span A 2-3, span B 4, tail 5.
  const BlockHash prefixHash = plan->blocks[1].hash;
  for (uint32_t s : {1u, 2u}) {
    EXPECT_EQ(plan->segments[s].parentHash, prefixHash);
    EXPECT_EQ(plan->segments[s].contextSegments, 1u);
    EXPECT_EQ(plan->segments[s].contextTokens, 20u);
  }
  EXPECT_EQ(plan->segments[1].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3}));
  EXPECT_EQ(plan->segments[2].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 1, 4}));
  EXPECT_EQ(plan->segments[3].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3, 4, 5}));
  // Both spans are computed right after the prefix; they sit after it and
  // after each other.
  EXPECT_EQ(plan->blocks[2].computePosition, 20);
  EXPECT_EQ(plan->blocks[4].position, 40);
  EXPECT_EQ(plan->blocks[4].computePosition, 20);
  EXPECT_EQ(plan->segments[3].parentHash,
            hasher.join(hasher.join(prefixHash, plan->blocks[3].hash),
                        plan->blocks[4].hash));
}

TEST(SpanContextPrefix, SpansHitInAnyOrderAfterTheSamePrefixOnly) {
  Fixture fixture(64, CacheMode::Span, RelocationMode::RopeInKernel,
                  PrefixContext);
  KvCacheManager &manager = fixture.manager;
  std::vector<TokenId> a = tokens(40, 1000), b = tokens(24, 2000);
  run(manager, 1, {prefix(tokens(16, 1)), span(a), span(b), tail({5})});
  run(manager, 2, {prefix(tokens(16, 1)), span(b), span(a), tail({6})});
  EXPECT_EQ(reusedBlocks(manager.plan(2), 1), 2u); // b
  EXPECT_EQ(reusedBlocks(manager.plan(2), 2), 3u); // a
  EXPECT_EQ(segmentHashes(manager.plan(1), 1),
            segmentHashes(manager.plan(2), 2));
  // Another system turn: the spans attended to another context.
  run(manager, 3, {prefix(tokens(16, 50)), span(a), span(b), tail({5})});
  EXPECT_EQ(reusedBlocks(manager.plan(3), 1), 0u);
  EXPECT_EQ(reusedBlocks(manager.plan(3), 2), 0u);
  // Isolated spans and spans that carry their own conversation hash from
  // the root instead.
  Segment own = span(a);
  own.ownContext = true;
  auto plan =
      layoutRequest({prefix(tokens(16, 1)), own, tail({5})}, CacheMode::Span,
                    PrefixContext, BlockSize, manager.hasher());
  ASSERT_TRUE(bool(plan));
  EXPECT_EQ(plan->segments[1].parentHash, manager.hasher().root());
  EXPECT_EQ(plan->segments[1].contextSegments, 0u);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(SpanScaling, WhatFollowsAPlusHashesItsScalingTheSpansDoNot) {
  // The tail reads the spans scaled, so its blocks depend on the scaling;
  // the spans (and the prefix) do not, and stay shared across settings.
  BlockHasher hasher("m");
  std::vector<Segment> prompt = {prefix(tokens(20, 1)), span(tokens(20, 100)),
                                 span(tokens(5, 200)), tail(tokens(3, 300))};
  SpanOptions scaled = PrefixContext, sharper = PrefixContext;
  scaled.temperature = 0.8f;
  sharper.temperature = 0.7f;
  auto plain =
      layoutRequest(prompt, CacheMode::Span, PrefixContext, BlockSize, hasher);
  auto first =
      layoutRequest(prompt, CacheMode::Span, scaled, BlockSize, hasher);
  auto second =
      layoutRequest(prompt, CacheMode::Span, sharper, BlockSize, hasher);
  auto again =
      layoutRequest(prompt, CacheMode::Span, scaled, BlockSize, hasher);
  ASSERT_TRUE(plain && first && second && again);
  for (uint32_t s : {0u, 1u, 2u}) {
    EXPECT_EQ(segmentHashes(*plain, s), segmentHashes(*first, s));
    EXPECT_EQ(segmentHashes(*first, s), segmentHashes(*second, s));
  }
  EXPECT_NE(segmentHashes(*plain, 3), segmentHashes(*first, 3));
  EXPECT_NE(segmentHashes(*first, 3), segmentHashes(*second, 3));
  EXPECT_EQ(segmentHashes(*first, 3), segmentHashes(*again, 3));
  // Without a plus there is nothing to scale: the same blocks.
  std::vector<Segment> causal = {prefix(tokens(20, 1)), tail(tokens(3, 300))};
  auto causalPlain =
      layoutRequest(causal, CacheMode::Span, PrefixContext, BlockSize, hasher);
  auto causalScaled =
      layoutRequest(causal, CacheMode::Span, scaled, BlockSize, hasher);
  ASSERT_TRUE(causalPlain && causalScaled);
  EXPECT_EQ(segmentHashes(*causalPlain, 1), segmentHashes(*causalScaled, 1));
}

TEST(SpanContextPrefix, ReropeMovesComputedSpansBeforeTheTailReadsThem) {
  Fixture fixture(64, CacheMode::Span, RelocationMode::Rerope, PrefixContext);
  KvCacheManager &manager = fixture.manager;
  std::vector<Segment> segments = {prefix(tokens(16, 1)), span(tokens(20, 100)),
                                   span(tokens(20, 200)), tail({5})};
  ASSERT_EQ(manager.admit(1, segments).status, AdmitStatus::Admitted);
  {
    const RequestPlan &plan = manager.plan(1);
    // The tail's run waits for the moves; the spans' do not.
    ASSERT_EQ(plan.runs.size(), 4u);
    EXPECT_FALSE(plan.runs[1].afterSpanRelocation);
    EXPECT_FALSE(plan.runs[2].afterSpanRelocation);
    EXPECT_TRUE(plan.runs[3].afterSpanRelocation);
    // The second span is computed after the prefix, at 16, not 36.
    EXPECT_EQ(fixture.pool.storedPosition(plan.blocks[3].block), 16);
  }
  auto step = manager.planStep();
  ASSERT_TRUE(bool(step));
  EXPECT_TRUE(step->relocation.batches.empty());
  manager.finishStep(*step);
  const uint32_t tailSegment = manager.plan(1).runs[3].segment;
  EXPECT_TRUE(manager.relocateComputedSpans(1, tailSegment));
  EXPECT_FALSE(manager.relocateComputedSpans(1, tailSegment));
  step = manager.planStep();
  ASSERT_TRUE(bool(step));
  EXPECT_FALSE(step->relocation.batches.empty());
  manager.finishStep(*step);
  const RequestPlan &plan = manager.plan(1);
  EXPECT_EQ(fixture.pool.storedPosition(plan.blocks[3].block), 36);
  EXPECT_EQ(fixture.pool.storedPosition(plan.blocks[4].block), 52);
  manager.commitPrefill(1);
  manager.release(1);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(SpanContextPrefix, ReropeComputesAPartlyCachedSpanWhole) {
  Fixture fixture(64, CacheMode::Span, RelocationMode::Rerope, PrefixContext);
  KvCacheManager &manager = fixture.manager;
  std::vector<TokenId> document = tokens(40, 1000);
  run(manager, 1, {prefix(tokens(16, 1)), span(document), tail({5})});
  manager.release(1);
  // A longer document with the same head: its first two blocks are cached
  // at their request position, which is not where the rest is computed.
  std::vector<TokenId> longer = document;
  longer.resize(64, 7);
  ASSERT_EQ(
      manager.admit(2, {prefix(tokens(16, 1)), span(longer), tail({5})}).status,
      AdmitStatus::Admitted);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 1), 0u);
  manager.release(2);
  ASSERT_POOL_OK(fixture.pool);
}

// Boundary recompute.

TEST(SpanRecompute, HeadsOfLaterSpansAreRecomputedInTheCallsContext) {
  BlockHasher hasher("m");
  const SpanOptions options{SpanContext::Prefix, 1, 0};
  auto plan = layoutRequest({prefix(tokens(16, 1)), span(tokens(40, 100)),
                             span(tokens(20, 200)), tail(tokens(3, 300))},
                            CacheMode::Span, options, BlockSize, hasher);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  // prefix, span A (saw everything before it: no head), span B, B's head,
  // tail. Blocks: prefix 0, A 1-3, B 4-5, head 6, tail 7.
  ASSERT_EQ(plan->segments.size(), 5u);
  const SegmentPlan &head = plan->segments[3];
  EXPECT_TRUE(head.boundary);
  EXPECT_EQ(head.numTokens, 16u);
  EXPECT_EQ(head.firstToken, plan->segments[2].firstToken);
  EXPECT_EQ(head.firstPosition, 56);
  EXPECT_EQ(head.contextSegments, 2u);
  EXPECT_EQ(head.pages, (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3, 6}));
  // The tail reads B's recomputed head, then the rest of B.
  EXPECT_EQ(plan->segments[4].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3, 6, 5, 7}));
  // B itself is untouched: the same hash as without a recompute.
  auto plain = layoutRequest({prefix(tokens(16, 1)), span(tokens(40, 100)),
                              span(tokens(20, 200)), tail(tokens(3, 300))},
                             CacheMode::Span, PrefixContext, BlockSize, hasher);
  ASSERT_TRUE(bool(plain));
  EXPECT_EQ(plan->blocks[4].hash, plain->blocks[4].hash);
  EXPECT_NE(plan->segments[4].parentHash, plain->segments[3].parentHash);
  // Isolated spans recompute the first span's head too.
  auto isolated = layoutRequest(
      {prefix(tokens(16, 1)), span(tokens(40, 100)), tail(tokens(3, 300))},
      CacheMode::Span, SpanOptions{SpanContext::Isolated, 1, 0}, BlockSize,
      hasher);
  ASSERT_TRUE(bool(isolated));
  ASSERT_EQ(isolated->segments.size(), 4u);
  EXPECT_TRUE(isolated->segments[2].boundary);
}

TEST(SpanRecompute, AnExactRepeatHitsTheRecomputedHeadsAShuffleRecomputes) {
  Fixture fixture(64, CacheMode::Span, RelocationMode::RopeInKernel,
                  SpanOptions{SpanContext::Prefix, 1, 0});
  KvCacheManager &manager = fixture.manager;
  std::vector<TokenId> a = tokens(40, 1000), b = tokens(24, 2000);
  std::vector<Segment> ab = {prefix(tokens(16, 1)), span(a), span(b),
                             tail({5})};
  std::vector<Segment> ba = {prefix(tokens(16, 1)), span(b), span(a),
                             tail({5})};
  run(manager, 1, ab);
  manager.release(1);
  run(manager, 2, ab);
  // Everything but the last block (always computed) hits.
  EXPECT_EQ(manager.plan(2).runs.size(), 1u);
  EXPECT_EQ(manager.plan(2).numReusedTokens,
            manager.plan(2).numPromptTokens - 1);
  manager.release(2);
  run(manager, 3, ba);
  const RequestPlan &shuffled = manager.plan(3);
  // Both spans hit; only a's head (now second) and the tail are computed.
  EXPECT_EQ(reusedBlocks(shuffled, 1), 2u);
  EXPECT_EQ(reusedBlocks(shuffled, 2), 3u);
  ASSERT_EQ(shuffled.runs.size(), 2u);
  EXPECT_TRUE(shuffled.segments[shuffled.runs[0].segment].boundary);
  EXPECT_EQ(shuffled.runs[0].numTokens, 16u);
  manager.release(3);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(SpanRecompute, EndBlocksAreRecomputedAfterTheSpansKeptHead) {
  BlockHasher hasher("m");
  const SpanOptions options{SpanContext::Prefix, 0, 1};
  auto plan = layoutRequest({prefix(tokens(16, 1)), span(tokens(40, 100)),
                             span(tokens(40, 200)), tail(tokens(3, 300))},
                            CacheMode::Span, options, BlockSize, hasher);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  // prefix 0, span A 1-3, span B 4-6, B's last block recomputed 7, tail 8.
  ASSERT_EQ(plan->segments.size(), 5u);
  const SegmentPlan &end = plan->segments[3];
  EXPECT_TRUE(end.boundary);
  EXPECT_EQ(end.numTokens, 8u);
  EXPECT_EQ(end.firstToken, plan->blocks[6].firstToken);
  EXPECT_EQ(end.firstPosition, plan->blocks[6].position);
  EXPECT_EQ(end.contextSegments, 3u); // the prefix, A and B's kept blocks
  // It reads B's first two blocks as cached, right after A.
  EXPECT_EQ(end.pages, (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(plan->segments[4].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 1, 2, 3, 4, 5, 7, 8}));
  // Its hash depends on the blocks it read: B's kept ones included.
  EXPECT_EQ(end.parentHash,
            hasher.join(hasher.join(hasher.join(plan->blocks[0].hash,
                                                plan->blocks[3].hash),
                                    plan->blocks[4].hash),
                        plan->blocks[5].hash));
  EXPECT_EQ(plan->segments[4].parentHash, plan->blocks[7].hash);
}

TEST(SpanRecompute, ReropeMovesEachSpanBeforeItsEndRunReadsItsKeptBlocks) {
  // prefix, A, B, B's end run, C, C's end run, tail: B's end run reads B's
  // kept block, which must sit at its request position by then, while C is
  // not computed yet; C moves before its own end run.
  Fixture fixture(64, CacheMode::Span, RelocationMode::Rerope,
                  SpanOptions{SpanContext::Prefix, 0, 1});
  KvCacheManager &manager = fixture.manager;
  ASSERT_EQ(
      manager
          .admit(1, {prefix(tokens(16, 1)), span(tokens(20, 100)),
                     span(tokens(20, 200)), span(tokens(20, 300)), tail({5})})
          .status,
      AdmitStatus::Admitted);
  const RequestPlan &plan = manager.plan(1);
  ASSERT_EQ(plan.runs.size(), 7u);
  std::vector<bool> barriers;
  for (const ComputeRun &run : plan.runs)
    barriers.push_back(run.afterSpanRelocation);
  EXPECT_EQ(barriers,
            (std::vector<bool>{false, false, false, true, false, true, false}));
  const uint32_t bEnd = plan.runs[3].segment, cEnd = plan.runs[5].segment;
  const BlockId bKept = plan.blocks[plan.segments[2].firstBlock].block;
  const BlockId cKept = plan.blocks[plan.segments[4].firstBlock].block;
  auto step = manager.planStep();
  ASSERT_TRUE(bool(step));
  manager.finishStep(*step);
  // Before B's end run: B moves, C (not computed yet) stays where it is.
  EXPECT_TRUE(manager.relocateComputedSpans(1, bEnd));
  step = manager.planStep();
  ASSERT_TRUE(bool(step));
  manager.finishStep(*step);
  EXPECT_EQ(fixture.pool.storedPosition(bKept), 36);
  EXPECT_EQ(fixture.pool.storedPosition(cKept), 16);
  EXPECT_TRUE(manager.relocateComputedSpans(1, cEnd));
  step = manager.planStep();
  ASSERT_TRUE(bool(step));
  manager.finishStep(*step);
  EXPECT_EQ(fixture.pool.storedPosition(cKept), 56);
  EXPECT_FALSE(manager.relocateComputedSpans(1, UINT32_MAX));
  manager.commitPrefill(1);
  manager.release(1);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(SpanBlend, OneBlendAfterThePlusMirrorsEverySpanBlockAndTheTailReadsIt) {
  Fixture fixture(128, CacheMode::Span, RelocationMode::RopeInKernel,
                  SpanOptions{SpanContext::Prefix, 0, 1, 15});
  KvCacheManager &manager = fixture.manager;
  const std::vector<Segment> ab = {prefix(tokens(16, 1)), span(tokens(20, 100)),
                                   span(tokens(20, 200)), tail({5, 6})};
  run(manager, 1, ab);
  const RequestPlan &plan = manager.plan(1);
  // prefix, A (2 blocks), B (2 blocks), blend (4 blocks), tail.
  ASSERT_EQ(plan.segments.size(), 5u);
  const SegmentPlan &blend = plan.segments[3];
  EXPECT_TRUE(blend.blend);
  EXPECT_TRUE(blend.boundary);
  EXPECT_EQ(blend.numBlocks, 4u);
  EXPECT_EQ(blend.numTokens, 40u);
  EXPECT_EQ(blend.firstPosition, 16);
  EXPECT_EQ(blend.contextSegments, 1u);
  EXPECT_EQ(blend.pages, (llvm::SmallVector<uint32_t, 16>{0, 5, 6, 7, 8}));
  std::vector<uint32_t> sources;
  std::vector<bool> forced;
  for (uint32_t b = 0; b < blend.numBlocks; ++b) {
    const LogicalBlock &block = plan.blocks[blend.firstBlock + b];
    sources.push_back(block.blendSource);
    forced.push_back(block.blendForced);
    EXPECT_EQ(block.position, plan.blocks[block.blendSource].position);
    EXPECT_EQ(block.numTokens, plan.blocks[block.blendSource].numTokens);
  }
  EXPECT_EQ(sources, (std::vector<uint32_t>{1, 2, 3, 4}));
  // A saw all its context (the prefix); B's end block is recomputed whole.
  EXPECT_EQ(forced, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(plan.segments[4].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 5, 6, 7, 8, 9}));
  manager.release(1);

  // The same call again hits the whole blend; B before A hits both spans
  // but computes a new blend (another context), which counts as reused.
  run(manager, 2, ab);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 3), 4u);
  manager.release(2);
  run(manager, 3,
      {prefix(tokens(16, 1)), span(tokens(20, 200)), span(tokens(20, 100)),
       tail({5, 6})});
  const RequestPlan &ba = manager.plan(3);
  EXPECT_EQ(reusedBlocks(ba, 1) + reusedBlocks(ba, 2), 4u);
  EXPECT_EQ(reusedBlocks(ba, 3), 0u);
  EXPECT_EQ(ba.numReusedTokens, 16u + 40u);
  manager.release(3);
  ASSERT_POOL_OK(fixture.pool);
}

TEST(SpanBlend, ABlendMissingOneBlockIsComputedWhole) {
  Fixture fixture(128, CacheMode::Span, RelocationMode::RopeInKernel,
                  SpanOptions{SpanContext::Prefix, 0, 0, 15});
  KvCacheManager &manager = fixture.manager;
  const std::vector<Segment> ab = {prefix(tokens(16, 1)), span(tokens(20, 100)),
                                   span(tokens(20, 200)), tail({5, 6})};
  run(manager, 1, ab);
  const SegmentPlan blend = manager.plan(1).segments[3];
  const BlockId evicted = manager.plan(1).blocks[blend.firstBlock + 2].block;
  manager.release(1);
  // Drop one blend block from the cache: the rest of the blend must not hit.
  fixture.pool.uncache(evicted);
  AdmitResult result = manager.admit(2, ab);
  ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
  EXPECT_EQ(reusedBlocks(manager.plan(2), 3), 0u);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 1), 2u);
  manager.release(2);
  ASSERT_POOL_OK(fixture.pool);
}

SpanOptions guidedOptions(uint32_t percent) {
  SpanOptions options;
  options.recomputeEndBlocks = 0;
  options.guidedPercent = percent;
  return options;
}

TEST(SpanGuided, ARepairAfterThePlusMirrorsItsSpansAndDependsOnTheQuestion) {
  Fixture fixture(128, CacheMode::Span, RelocationMode::RopeInKernel,
                  guidedOptions(20));
  KvCacheManager &manager = fixture.manager;
  const std::vector<Segment> ab = {prefix(tokens(16, 1)), span(tokens(20, 100)),
                                   span(tokens(20, 200)), tail(tokens(20, 5))};
  run(manager, 1, ab);
  const RequestPlan &plan = manager.plan(1);
  // prefix, A (2 blocks), B (2 blocks), repair (4 blocks), tail (2).
  ASSERT_EQ(plan.segments.size(), 5u);
  const SegmentPlan &repair = plan.segments[3];
  EXPECT_TRUE(repair.blend);
  EXPECT_TRUE(repair.guided);
  EXPECT_EQ(repair.numBlocks, 4u);
  std::vector<bool> candidates, forced;
  for (uint32_t b = 0; b < repair.numBlocks; ++b) {
    candidates.push_back(plan.blocks[repair.firstBlock + b].repairCandidate);
    forced.push_back(plan.blocks[repair.firstBlock + b].blendForced);
  }
  // A saw all its context (the prefix): only B's blocks may be chosen.
  EXPECT_EQ(candidates, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(forced, (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(plan.segments[4].pages,
            (llvm::SmallVector<uint32_t, 16>{0, 5, 6, 7, 8, 9, 10}));
  manager.release(1);

  // The same call hits everything it can (the last block is computed).
  run(manager, 2, ab);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 3), 4u);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 4), 1u);
  manager.release(2);
  // Another question over the same spans: the spans hit, the repair (its
  // choice is the question's) and the tail are computed.
  run(manager, 3,
      {prefix(tokens(16, 1)), span(tokens(20, 100)), span(tokens(20, 200)),
       tail(tokens(20, 7))});
  EXPECT_EQ(reusedBlocks(manager.plan(3), 1) + reusedBlocks(manager.plan(3), 2),
            4u);
  EXPECT_EQ(reusedBlocks(manager.plan(3), 3), 0u);
  manager.release(3);
  // Another percentage: another repair.
  ASSERT_POOL_OK(fixture.pool);
  const BlockHasher &hasher = manager.hasher();
  auto layout20 =
      layoutRequest(ab, CacheMode::Span, guidedOptions(20), 16, hasher);
  auto layout30 =
      layoutRequest(ab, CacheMode::Span, guidedOptions(30), 16, hasher);
  ASSERT_TRUE(layout20 && layout30);
  EXPECT_NE(layout20->segments[3].parentHash.str(),
            layout30->segments[3].parentHash.str());
  EXPECT_EQ(layout20->blocks[1].hash.str(), layout30->blocks[1].hash.str());
  // A call resumed after a preemption (its generated tokens appended to the
  // tail) probes with the question only: the same repair.
  std::vector<Segment> resumed = ab;
  resumed.back().tokens.insert(resumed.back().tokens.end(), {900, 901, 902});
  resumed.back().generatedTokens = 3;
  auto resumedLayout =
      layoutRequest(resumed, CacheMode::Span, guidedOptions(20), 16, hasher);
  ASSERT_TRUE(bool(resumedLayout));
  EXPECT_EQ(resumedLayout->segments[3].parentHash.str(),
            layout20->segments[3].parentHash.str());
  EXPECT_EQ(resumedLayout->segments[3].probeTokens, 20u);
  EXPECT_EQ(resumedLayout->segments[4].numTokens, 23u);
}

TEST(SpanGuided, TheSegmentsAfterAComputedRepairAreComputed) {
  // Its probe writes K/V into the tail's blocks: a tail block found in the
  // cache while the repair is not must not be overwritten.
  Fixture fixture(128, CacheMode::Span, RelocationMode::RopeInKernel,
                  guidedOptions(20));
  KvCacheManager &manager = fixture.manager;
  const std::vector<Segment> ab = {prefix(tokens(16, 1)), span(tokens(20, 100)),
                                   span(tokens(20, 200)), tail(tokens(40, 5))};
  run(manager, 1, ab);
  const SegmentPlan repair = manager.plan(1).segments[3];
  const BlockId evicted = manager.plan(1).blocks[repair.firstBlock].block;
  manager.release(1);
  fixture.pool.uncache(evicted);
  AdmitResult result = manager.admit(2, ab);
  ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
  EXPECT_EQ(reusedBlocks(manager.plan(2), 3), 0u);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 4), 0u);
  EXPECT_EQ(reusedBlocks(manager.plan(2), 1), 2u);
  manager.release(2);
  ASSERT_POOL_OK(fixture.pool);
}

} // namespace
