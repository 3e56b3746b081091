//===- ExecutorSessionTest.cpp - Calls added to a run while it runs -------===//
//
// A server adds requests to one run in progress (Executor::beginSession,
// addCalls, step): calls added mid-run, while others prefill and decode,
// get the greedy answers they get alone on a fresh cache; a call cancelled
// mid-run fails, releases its blocks and leaves the others' answers as they
// were; a call that splices in the output of one that finished before it
// was added runs with that output. On the tiny random-weight llama the
// build generates, with f32 GEMMs (answers do not depend on what shares a
// step).
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <numeric>

namespace spanc::sched {
namespace {

const char *kModelPath = "test/data/synthetic/tiny-llama-synthetic.gguf";

std::vector<plan::TokenId> range(plan::TokenId first, int count) {
  std::vector<plan::TokenId> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

plan::PlanSegment segment(plan::SegmentKind kind,
                          std::vector<plan::TokenId> tokens) {
  plan::PlanSegment result;
  result.kind = kind;
  result.pieces.emplace_back().tokens = std::move(tokens);
  return result;
}

/// A RAG-shaped call: a system prefix, two document spans, a question.
/// Calls made from the same documents share their span blocks.
plan::Call ragCall(int firstDocument, int secondDocument, int question,
                   int64_t maxTokens = 12) {
  plan::Call call;
  call.options.maxTokens = maxTokens;
  call.segments.push_back(segment(plan::SegmentKind::Prefix, range(20, 19)));
  call.segments.push_back(
      segment(plan::SegmentKind::Span, range(40 + 50 * firstDocument, 37)));
  call.segments.push_back(
      segment(plan::SegmentKind::Span, range(40 + 50 * secondDocument, 41)));
  call.segments.push_back(
      segment(plan::SegmentKind::Tail, range(300 + 7 * question, 9)));
  return call;
}

class ExecutorSessionTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(llvm::sys::fs::exists(kModelPath)) << "missing " << kModelPath;
    model::ModelOptions modelOptions;
    modelOptions.forceF32 = true;
    auto loaded = model::Model::load(kModelPath, modelOptions);
    ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
    model = std::move(*loaded);
    auto tokens = model::Tokenizer::fromGguf(model->file());
    ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
    tokenizer = std::move(*tokens);
  }

  std::unique_ptr<Executor> makeExecutor() {
    ExecutorOptions options;
    options.cacheTokens = 2048;
    // A small budget: prefills take several steps, so calls added "mid-run"
    // land while others are still prefilling as well as decoding.
    options.stepTokenBudget = 48;
    auto executor = Executor::create(*model, *tokenizer, options);
    EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
    return executor ? std::move(*executor) : nullptr;
  }

  /// The call's greedy answer run alone on a fresh cache.
  std::vector<plan::TokenId> alone(plan::Call call) {
    plan::Plan plan;
    call.id = 0;
    call.dependencies.clear();
    plan.calls.push_back(std::move(call));
    std::unique_ptr<Executor> executor = makeExecutor();
    std::vector<CallOutcome> outcomes = executor->run(plan);
    EXPECT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
    return outcomes[0].tokens;
  }

  static void append(plan::Plan &plan, plan::Call call) {
    call.id = plan::CallId(plan.calls.size());
    plan.calls.push_back(std::move(call));
  }

  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

TEST_F(ExecutorSessionTest, CallsAddedMidRunAnswerAsTheyDoAlone) {
  std::vector<plan::Call> calls = {ragCall(0, 1, 0), ragCall(1, 0, 1),
                                   ragCall(0, 2, 2), ragCall(2, 1, 3, 20)};
  std::vector<std::vector<plan::TokenId>> expected;
  for (const plan::Call &call : calls)
    expected.push_back(alone(call));

  std::unique_ptr<Executor> executor = makeExecutor();
  plan::Plan plan;
  std::vector<CallOutcome> outcomes;
  append(plan, calls[0]);
  executor->beginSession(plan, outcomes, nullptr);
  executor->addCalls();
  // Call 1 joins while call 0 prefills, calls 2 and 3 while 0 and 1 decode.
  ASSERT_TRUE(executor->step());
  append(plan, calls[1]);
  executor->addCalls();
  for (int s = 0; s < 5; ++s)
    ASSERT_TRUE(executor->step());
  EXPECT_GE(outcomes[0].tokens.size(), 1u) << "call 0 should be decoding";
  append(plan, calls[2]);
  append(plan, calls[3]);
  executor->addCalls();
  EXPECT_EQ(executor->numRunning() + executor->numWaiting(), 4u);
  int steps = 0;
  while (executor->step())
    ASSERT_LT(++steps, 1000);
  for (size_t id = 0; id < calls.size(); ++id) {
    EXPECT_TRUE(executor->isDone(plan::CallId(id)));
    EXPECT_TRUE(outcomes[id].succeeded) << outcomes[id].error;
    EXPECT_EQ(outcomes[id].tokens, expected[id]) << "call " << id;
  }
  // Calls added later reused the spans the earlier ones computed.
  EXPECT_GT(outcomes[2].stats.reusedTokens, 0u);
  executor->endSession();
}

TEST_F(ExecutorSessionTest, CancelledCallReleasesItsBlocksAndSparesTheOthers) {
  std::vector<plan::TokenId> expected = alone(ragCall(0, 1, 0));
  std::unique_ptr<Executor> executor = makeExecutor();
  const uint32_t freeAtStart = executor->pool().numFreeBlocks();
  plan::Plan plan;
  std::vector<CallOutcome> outcomes;
  executor->beginSession(plan, outcomes, nullptr);
  append(plan, ragCall(0, 1, 0));
  append(plan, ragCall(2, 1, 1, 200));
  append(plan, ragCall(2, 0, 2)); // cancelled before it is admitted
  executor->addCalls();
  executor->cancelCall(2, "client went away");
  for (int s = 0; s < 8; ++s)
    ASSERT_TRUE(executor->step());
  ASSERT_FALSE(executor->isDone(1));
  executor->cancelCall(1, "client went away");
  EXPECT_TRUE(executor->isDone(1));
  int steps = 0;
  while (executor->step())
    ASSERT_LT(++steps, 1000);
  EXPECT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
  EXPECT_EQ(outcomes[0].tokens, expected);
  for (plan::CallId id : {1u, 2u}) {
    EXPECT_FALSE(outcomes[id].succeeded);
    EXPECT_EQ(outcomes[id].error, "client went away");
  }
  EXPECT_EQ(outcomes[2].stats.generatedTokens, 0u);
  EXPECT_EQ(executor->numRunning(), 0u);
  // Every block is back in the pool (cached blocks are free, evictable).
  EXPECT_EQ(executor->pool().numFreeBlocks(), freeAtStart);
  executor->endSession();
}

TEST_F(ExecutorSessionTest, CallAddedAfterItsDependencyFinishedSplicesItIn) {
  std::unique_ptr<Executor> executor = makeExecutor();
  plan::Plan plan;
  std::vector<CallOutcome> outcomes;
  executor->beginSession(plan, outcomes, nullptr);
  append(plan, ragCall(0, 1, 0, 6));
  executor->addCalls();
  int steps = 0;
  while (executor->step())
    ASSERT_LT(++steps, 1000);
  ASSERT_TRUE(outcomes[0].succeeded) << outcomes[0].error;

  plan::Call consumer;
  consumer.options.maxTokens = 5;
  consumer.segments.push_back(segment(plan::SegmentKind::Prefix, range(20, 5)));
  plan::Piece output;
  output.call = 0;
  consumer.segments.back().pieces.push_back(output);
  consumer.dependencies.push_back(0);
  append(plan, consumer);
  executor->addCalls();
  while (executor->step())
    ASSERT_LT(++steps, 2000);
  ASSERT_TRUE(executor->isDone(1));
  EXPECT_TRUE(outcomes[1].succeeded) << outcomes[1].error;
  EXPECT_EQ(outcomes[1].stats.promptTokens, 5 + outcomes[0].tokens.size());
  executor->endSession();
}

} // namespace
} // namespace spanc::sched
