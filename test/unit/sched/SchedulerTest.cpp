//===- SchedulerTest.cpp - The scheduler alone, without a model -----------===//
//
// The scheduler's decisions on a real KV cache manager and block pool, with
// the runner's report written by hand: decode before prefill within the
// budget, the plain SchedulerOutput of a call, a run marked
// afterSpanRelocation held until its spans were moved, the names of what
// waiting calls wait for, and fairness across requests: a short request
// beside a hog of 200 calls is admitted and prefilled at the next step
// (docs/ARCHITECTURE.md, "Running a plan").
//
//===----------------------------------------------------------------------===//

#include "runtime/sched/Scheduler.h"

#include "llvm/ADT/STLExtras.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <numeric>

namespace spanc::sched {
namespace {

using kv::SegmentKind;

std::vector<plan::TokenId> range(plan::TokenId first, int count) {
  std::vector<plan::TokenId> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

plan::PlanSegment segment(SegmentKind kind, std::vector<plan::TokenId> tokens) {
  plan::PlanSegment result;
  result.kind = kind;
  result.pieces.emplace_back().tokens = std::move(tokens);
  return result;
}

plan::Call &addCall(plan::Plan &plan, int64_t maxTokens = 4) {
  plan::Call &call = plan.calls.emplace_back();
  call.id = plan::CallId(plan.calls.size() - 1);
  call.options.maxTokens = maxTokens;
  return call;
}

struct Harness {
  explicit Harness(
      uint32_t numBlocks, int64_t budget = 512,
      kv::RelocationMode relocation = kv::RelocationMode::RopeInKernel,
      kv::SpanOptions spanOptions = {kv::SpanContext::Prefix, 0, 0},
      FairnessOptions fairness = {})
      : pool(numBlocks, 16),
        cache(pool, kv::BlockHasher("scheduler-test"), kv::CacheMode::Span,
              relocation, spanOptions),
        scheduler(cache, pool, options(budget, fairness)) {}

  static SchedulerOptions options(int64_t budget, FairnessOptions fairness) {
    SchedulerOptions result;
    result.blockSize = 16;
    result.stepTokenBudget = budget;
    result.fairness = fairness;
    return result;
  }

  /// What a runner reports: `token` for every sequence that samples,
  /// recorded in the outcome as the runner would.
  void sampleAll(plan::TokenId token) {
    result.clear();
    for (size_t s = 0; s < output.sequences.size(); ++s) {
      const ScheduledSequence &sequence = output.sequences[s];
      if (!sequence.sample)
        continue;
      CallOutcome &outcome = outcomes[sequence.call];
      SampledToken &sampled = result.sampled.emplace_back();
      sampled.sequence = uint32_t(s);
      sampled.token = token;
      sampled.first = outcome.tokens.empty();
      outcome.tokens.push_back(token);
      ++outcome.stats.generatedTokens;
      sampled.stop = int64_t(outcome.tokens.size()) >=
                     plan.calls[sequence.call].options.maxTokens;
    }
  }

  /// Schedules a step (admission first) and runs it.
  void step(plan::TokenId token = 7) {
    ASSERT_FALSE(bool(scheduler.schedule(output)));
    run(token);
  }
  /// Runs the step scheduled last: samples `token`, updates.
  void run(plan::TokenId token = 7) {
    sampleAll(token);
    scheduler.update(output, result);
  }

  kv::BlockPool pool;
  kv::KvCacheManager cache;
  Scheduler scheduler;
  plan::Plan plan;
  std::vector<CallOutcome> outcomes;
  SchedulerOutput output;
  RunnerOutput result;
};

TEST(SchedulerTest, AOneCallStepIsAPlainValue) {
  Harness harness(64);
  addCall(harness.plan)
      .segments.push_back(segment(SegmentKind::Prefix, range(100, 20)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));

  const SchedulerOutput &output = harness.output;
  EXPECT_EQ(output.admittedCalls, 1u);
  EXPECT_TRUE(output.blockCopies.empty());
  ASSERT_EQ(output.sequences.size(), 1u);
  const ScheduledSequence &sequence = output.sequences[0];
  EXPECT_EQ(sequence.call, 0u);
  EXPECT_EQ(sequence.rows, model::RowKind::Prompt);
  EXPECT_TRUE(sequence.wantsLogits);
  EXPECT_TRUE(sequence.sample);
  EXPECT_TRUE(sequence.completesPrompt);
  EXPECT_EQ(output.tokensOf(sequence).vec(), range(100, 20));
  EXPECT_EQ(output.positionsOf(sequence).vec(), range(0, 20));
  EXPECT_EQ(output.validTokensOf(sequence).vec(),
            (std::vector<int32_t>{16, 4}));
  ASSERT_EQ(output.blockIdsOf(sequence).size(), 2u);
  EXPECT_NE(output.blockIdsOf(sequence)[0], output.blockIdsOf(sequence)[1]);
  EXPECT_TRUE(output.stepPlan.relocation.empty());

  // The runner's token is fed back as a decode row at the next position.
  // The partial last block was cached with the prefill, so its first write
  // goes to a copy, which the next step hands the backend first.
  const int32_t cachedBlock = output.blockIdsOf(sequence)[1];
  harness.sampleAll(42);
  harness.scheduler.update(harness.output, harness.result);
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  ASSERT_EQ(output.blockCopies.size(), 1u);
  const kv::RelocationOp copy = output.blockCopies[0];
  EXPECT_EQ(int32_t(copy.source), cachedBlock);
  EXPECT_EQ(copy.delta, 0);
  ASSERT_EQ(output.sequences.size(), 1u);
  EXPECT_EQ(output.sequences[0].rows, model::RowKind::Decode);
  EXPECT_EQ(output.tokensOf(output.sequences[0]).vec(),
            (std::vector<int32_t>{42}));
  EXPECT_EQ(output.positionsOf(output.sequences[0]).vec(),
            (std::vector<int32_t>{20}));
  EXPECT_EQ(output.validTokensOf(output.sequences[0]).vec(),
            (std::vector<int32_t>{16, 5}));
  EXPECT_EQ(output.blockIdsOf(output.sequences[0])[1],
            int32_t(copy.destination));
}

TEST(SchedulerTest, DecodeComesBeforePrefillWithinTheBudget) {
  Harness harness(64, /*budget=*/32);
  addCall(harness.plan, 8)
      .segments.push_back(segment(SegmentKind::Prefix, range(100, 16)));
  addCall(harness.plan, 8)
      .segments.push_back(segment(SegmentKind::Prefix, range(500, 80)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);

  // Step 1: the short prompt, then one block of the long one.
  harness.step();
  EXPECT_EQ(harness.output.admittedCalls, 2u);
  EXPECT_EQ(harness.output.tokens.size(), 32u);
  // Every later step: call 0's decode token first, then whole blocks of
  // call 1's prompt, never over the budget.
  for (int step = 0; step < 3; ++step) {
    ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
    const SchedulerOutput &output = harness.output;
    ASSERT_GE(output.sequences.size(), 2u);
    EXPECT_EQ(output.sequences[0].call, 0u);
    EXPECT_EQ(output.sequences[0].rows, model::RowKind::Decode);
    for (size_t s = 1; s < output.sequences.size(); ++s) {
      EXPECT_EQ(output.sequences[s].call, 1u);
      EXPECT_EQ(output.sequences[s].rows, model::RowKind::Prompt);
      EXPECT_EQ(output.sequences[s].numTokens % 16, 0u);
    }
    EXPECT_LE(int64_t(output.tokens.size()), 32);
    harness.sampleAll(7);
    harness.scheduler.update(output, harness.result);
  }
}

TEST(SchedulerTest, ARunAfterSpanRelocationWaitsForTheMove) {
  Harness harness(64, 512, kv::RelocationMode::Rerope);
  plan::Call &call = addCall(harness.plan);
  call.segments.push_back(segment(SegmentKind::Prefix, range(100, 16)));
  call.segments.push_back(segment(SegmentKind::Span, range(200, 16)));
  call.segments.push_back(segment(SegmentKind::Span, range(300, 16)));
  call.segments.push_back(segment(SegmentKind::Tail, range(900, 16)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);

  // Step 1 computes the prefix and the spans (the second at the position
  // right after the prefix, like the first) but not the tail: it reads the
  // spans where they belong, so they move first.
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  const SchedulerOutput &output = harness.output;
  ASSERT_FALSE(output.sequences.empty());
  for (const ScheduledSequence &sequence : output.sequences) {
    EXPECT_FALSE(sequence.completesPrompt);
    for (int32_t token : output.tokensOf(sequence))
      EXPECT_LT(token, 900);
  }
  EXPECT_EQ(output.tokens.size(), 48u);
  EXPECT_TRUE(output.stepPlan.relocation.empty());
  harness.sampleAll(7);
  harness.scheduler.update(output, harness.result);

  // Step 2: the move comes with the step, and the tail runs after it.
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  EXPECT_FALSE(output.stepPlan.relocation.empty());
  ASSERT_EQ(output.sequences.size(), 1u);
  EXPECT_TRUE(output.sequences[0].completesPrompt);
  EXPECT_EQ(output.tokensOf(output.sequences[0]).vec(), range(900, 16));
}

TEST(SchedulerTest, WhatFollowsAPlusReadsItsSpanPagesScaled) {
  // Span scaling (kv::SpanOptions::temperature, massScale): the tail and
  // its decode rows flag the pages of the spans and of the recomputed end
  // block; the spans and the recompute read their context unflagged.
  kv::SpanOptions spanOptions{kv::SpanContext::Prefix, 0, 1};
  spanOptions.temperature = 0.8f;
  spanOptions.massScale = 1.2f;
  Harness harness(64, 512, kv::RelocationMode::RopeInKernel, spanOptions);
  plan::Call &call = addCall(harness.plan);
  call.segments.push_back(segment(SegmentKind::Prefix, range(100, 16)));
  call.segments.push_back(segment(SegmentKind::Span, range(200, 32)));
  call.segments.push_back(segment(SegmentKind::Span, range(300, 32)));
  call.segments.push_back(segment(SegmentKind::Tail, range(900, 16)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);

  std::vector<uint8_t> tailFlags;
  for (int step = 0; step < 4 && tailFlags.empty(); ++step) {
    ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
    const SchedulerOutput &output = harness.output;
    EXPECT_EQ(output.spanPages.size(), output.blockIds.size());
    EXPECT_EQ(output.spanScaling.temperature, 0.8f);
    EXPECT_EQ(output.spanScaling.massScale, 1.2f);
    for (const ScheduledSequence &sequence : output.sequences) {
      std::vector<uint8_t> flags = output.spanPagesOf(sequence).vec();
      if (output.tokensOf(sequence)[0] >= 900)
        tailFlags = flags;
      else // a span, or the recompute of the second span's last block
        EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), 0)
            << "sequence from token " << output.tokensOf(sequence)[0];
    }
    harness.sampleAll(7);
    harness.scheduler.update(output, harness.result);
  }
  // Prefix, the first span's two blocks, the second's kept first block and
  // recomputed last block, the tail.
  EXPECT_EQ(tailFlags, (std::vector<uint8_t>{0, 1, 1, 1, 1, 0}));
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  ASSERT_EQ(harness.output.sequences.size(), 1u);
  EXPECT_EQ(harness.output.sequences[0].rows, model::RowKind::Decode);
  // The same pages and the generated token's new block.
  EXPECT_EQ(harness.output.spanPagesOf(harness.output.sequences[0]).vec(),
            (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0}));
}

TEST(SchedulerTest, WaitingCallsSayWhatTheyWaitFor) {
  // Two calls with the same cold prefix: the second waits for the first to
  // compute it (in-flight sharing), then hits it.
  Harness harness(64);
  for (int i = 0; i < 2; ++i) {
    plan::Call &call = addCall(harness.plan, 2);
    call.segments.push_back(segment(SegmentKind::Prefix, range(100, 32)));
    call.segments.push_back(segment(SegmentKind::Tail, range(700 + i, 1)));
  }
  harness.scheduler.beginRun(harness.plan, harness.outcomes);
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  EXPECT_EQ(harness.output.admittedCalls, 1u);
  EXPECT_EQ(harness.scheduler.waitingFor(0), std::nullopt);
  EXPECT_EQ(harness.scheduler.waitingFor(1), WaitingFor::BlocksInFlight);
  harness.run();
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  EXPECT_EQ(harness.output.admittedCalls, 1u);
  EXPECT_EQ(harness.scheduler.waitingFor(1), std::nullopt);
  EXPECT_EQ(harness.outcomes[1].stats.reusedTokens, 32u);

  // A call the cache cannot hold with room to grow waits for room.
  Harness small(6);
  addCall(small.plan, 16)
      .segments.push_back(segment(SegmentKind::Prefix, range(100, 40)));
  addCall(small.plan, 16)
      .segments.push_back(segment(SegmentKind::Prefix, range(300, 40)));
  small.scheduler.beginRun(small.plan, small.outcomes);
  ASSERT_FALSE(bool(small.scheduler.schedule(small.output)));
  EXPECT_EQ(small.output.admittedCalls, 1u);
  EXPECT_EQ(small.scheduler.waitingFor(1), WaitingFor::CacheRoom);
  EXPECT_STREQ(waitingForName(WaitingFor::CacheRoom), "cache room");
}

/// Adds request `tag`'s call to a run in progress: `tokens` as its prompt.
plan::CallId addShortRequest(Harness &harness, RequestTag tag,
                             std::vector<plan::TokenId> tokens) {
  plan::Call &call = addCall(harness.plan, 4);
  call.segments.push_back(segment(SegmentKind::Prefix, std::move(tokens)));
  harness.scheduler.addCalls(tag);
  return call.id;
}

TEST(SchedulerTest, AShortRequestBesideAHogOf200CallsIsAdmittedAtOnce) {
  // The hog: 200 calls with their own prompts and room to grow to 64
  // tokens; the cache holds about 20 of them at once.
  FairnessOptions fairness;
  fairness.maxRunningPerRequest = 8;
  Harness harness(200, 512, kv::RelocationMode::RopeInKernel,
                  {kv::SpanContext::Prefix, 0, 0}, fairness);
  for (int i = 0; i < 200; ++i)
    addCall(harness.plan, 64)
        .segments.push_back(
            segment(SegmentKind::Prefix, range(1000 + 32 * i, 32)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);
  for (int step = 0; step < 3; ++step)
    harness.step();
  EXPECT_EQ(harness.scheduler.numRunning(), 8u);
  EXPECT_EQ(harness.scheduler.numWaiting(), 192u);

  // In plan order it would wait behind the hog's 192 calls.
  const plan::CallId shortCall = addShortRequest(harness, 1, range(20000, 20));
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  EXPECT_GE(harness.output.admittedCalls, 1u);
  EXPECT_EQ(harness.scheduler.waitingFor(shortCall), std::nullopt);
  EXPECT_EQ(harness.scheduler.requestOf(shortCall), 1u);
  auto found = llvm::find_if(harness.output.sequences,
                             [&](const ScheduledSequence &sequence) {
                               return sequence.call == shortCall;
                             });
  ASSERT_NE(found, harness.output.sequences.end());
  EXPECT_TRUE(found->completesPrompt);
  // The hog's calls past its cap still wait.
  EXPECT_EQ(harness.scheduler.numRunning(), 9u);
}

TEST(SchedulerTest, AnotherRequestsPromptsLeaveAShareOfTheStep) {
  // Four hog calls with 480-token prompts, a budget of 128 tokens a step:
  // oldest first, the hog's prompts would take every step for 15 steps.
  FairnessOptions fairness;
  fairness.maxPrefillTokensPerRequest = 64;
  Harness harness(256, 128, kv::RelocationMode::RopeInKernel,
                  {kv::SpanContext::Prefix, 0, 0}, fairness);
  for (int i = 0; i < 4; ++i)
    addCall(harness.plan, 4)
        .segments.push_back(
            segment(SegmentKind::Prefix, range(1000 + 480 * i, 480)));
  harness.scheduler.beginRun(harness.plan, harness.outcomes);
  // Alone, the hog takes the whole budget.
  harness.step();
  EXPECT_EQ(harness.output.tokens.size(), 128u);

  const plan::CallId shortCall = addShortRequest(harness, 1, range(20000, 32));
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  EXPECT_EQ(harness.output.admittedCalls, 1u);
  const SchedulerOutput &output = harness.output;
  int64_t shortTokens = 0, hogTokens = 0;
  for (const ScheduledSequence &sequence : output.sequences)
    (sequence.call == shortCall ? shortTokens : hogTokens) +=
        sequence.numTokens;
  // The short prompt whole, and the hog the rest of the budget.
  EXPECT_EQ(shortTokens, 32);
  EXPECT_EQ(hogTokens, 96);
}

TEST(SchedulerTest, AHitsRecomputedEndBlocksAndTailRunAsOneSequence) {
  // prefix+end1: a hit recomputes the last block of each span that did not
  // see everything before it, then the tail. Their page lists are prefixes
  // of the tail's, so the step runs them as one sequence whose tokens say
  // where each sits in that list (one attention pass over the shared keys
  // instead of one per span).
  Harness harness(64, 512, kv::RelocationMode::RopeInKernel,
                  {kv::SpanContext::Prefix, 0, 1});
  auto runCall = [&](std::vector<plan::TokenId> first,
                     std::vector<plan::TokenId> second) {
    harness.plan = plan::Plan();
    plan::Call &call = addCall(harness.plan, 1);
    call.segments.push_back(segment(SegmentKind::Prefix, range(100, 16)));
    call.segments.push_back(segment(SegmentKind::Span, std::move(first)));
    call.segments.push_back(segment(SegmentKind::Span, std::move(second)));
    call.segments.push_back(segment(SegmentKind::Tail, range(900, 16)));
    harness.scheduler.beginRun(harness.plan, harness.outcomes);
  };
  // The miss: span B's end block follows span B, so it runs apart.
  runCall(range(200, 20), range(300, 20));
  for (int step = 0; step < 8 && harness.scheduler.numDone() < 1; ++step)
    harness.step();
  ASSERT_EQ(harness.scheduler.numDone(), 1u);
  harness.scheduler.endRun();
  // The hit, spans swapped: A's end block (4 tokens, logical 52..55) and
  // the tail (56..71) in one sequence over the tail's 6 pages.
  runCall(range(300, 20), range(200, 20));
  ASSERT_FALSE(bool(harness.scheduler.schedule(harness.output)));
  const SchedulerOutput &output = harness.output;
  ASSERT_EQ(output.sequences.size(), 1u);
  const ScheduledSequence &sequence = output.sequences[0];
  EXPECT_TRUE(sequence.mergedRuns);
  EXPECT_TRUE(sequence.completesPrompt);
  std::vector<int32_t> tokens = range(216, 4), indices = range(52, 4);
  for (plan::TokenId token : range(900, 16))
    tokens.push_back(token);
  for (plan::TokenId index : range(56, 16))
    indices.push_back(index);
  EXPECT_EQ(output.tokensOf(sequence).vec(), tokens);
  EXPECT_EQ(output.queryIndicesOf(sequence).vec(), indices);
  EXPECT_EQ(output.validTokensOf(sequence).vec(),
            (std::vector<int32_t>{16, 16, 4, 16, 4, 16}));
  harness.run();
}

} // namespace
} // namespace spanc::sched
