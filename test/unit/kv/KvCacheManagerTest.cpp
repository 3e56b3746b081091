//===- KvCacheManagerTest.cpp - Block tables, hashes, hits, page lists ----===//

#include "test/unit/kv/KvCacheManagerTestSupport.h"

#include <random>

using namespace spanc::kv;
using namespace spanc::kv::testing;

namespace {

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
