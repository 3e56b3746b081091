//===- KvCacheManagerSpanTest.cpp - Span context, recompute, blend, guided ===//
//
// The cache manager's span modes: spans chained from their prefix, heads and
// end blocks recomputed in the call's context, blended and question-guided
// repairs (docs/ARCHITECTURE.md, "Span attention").
//
//===----------------------------------------------------------------------===//

#include "test/unit/kv/KvCacheManagerTestSupport.h"

using namespace spanc::kv;
using namespace spanc::kv::testing;

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
