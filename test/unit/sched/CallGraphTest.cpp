//===- CallGraphTest.cpp - Readiness, outputs and trailers of a run -------===//

#include "runtime/sched/CallGraph.h"

#include <gtest/gtest.h>

namespace {

using namespace spanc;
using sched::CallGraph;

/// Call `id` whose prompt is `literal` then the output of each of `inputs`
/// (header 90, trailer 91 + input).
plan::Call &addCall(plan::Plan &plan, std::vector<plan::TokenId> literal,
                    std::vector<plan::CallId> inputs = {}) {
  plan::Call &call = plan.calls.emplace_back();
  call.id = plan::CallId(plan.calls.size() - 1);
  plan::PlanSegment &segment = call.segments.emplace_back();
  segment.pieces.emplace_back().tokens = std::move(literal);
  for (plan::CallId input : inputs) {
    plan::Piece &piece = segment.pieces.emplace_back();
    piece.tokens = {90};
    piece.call = input;
    piece.trailer = {91, plan::TokenId(input)};
    call.dependencies.push_back(input);
  }
  return call;
}

TEST(CallGraph, ACallIsReadyWhenEveryCallItSplicesInIsDone) {
  plan::Plan plan;
  addCall(plan, {1});
  addCall(plan, {2});
  addCall(plan, {3}, {0, 1});
  CallGraph graph;
  graph.reset(&plan);
  llvm::SmallVector<plan::CallId, 4> ready;
  graph.addCalls(0, ready);
  EXPECT_EQ(ready, (llvm::SmallVector<plan::CallId, 4>{0, 1}));
  EXPECT_EQ(graph.numCalls(), 3u);
  EXPECT_NE(graph.readyAt(0), CallGraph::Clock::time_point());
  EXPECT_EQ(graph.readyAt(2), CallGraph::Clock::time_point());
  // The consumer's trailer for each output; none for an unused output.
  ASSERT_TRUE(graph.trailer(0).has_value());
  EXPECT_EQ(*graph.trailer(0), (std::vector<plan::TokenId>{91, 0}));
  EXPECT_FALSE(graph.trailer(2).has_value());

  ready.clear();
  graph.markDone(0, CallGraph::Tokens{7, 8}, ready);
  EXPECT_TRUE(ready.empty());
  EXPECT_FALSE(graph.resolve(2).has_value()); // call 1's output is missing
  graph.markDone(1, CallGraph::Tokens{9}, ready);
  EXPECT_EQ(ready, (llvm::SmallVector<plan::CallId, 4>{2}));
  std::optional<std::vector<plan::Segment>> prompt = graph.resolve(2);
  ASSERT_TRUE(prompt.has_value());
  ASSERT_EQ(prompt->size(), 1u);
  EXPECT_EQ((*prompt)[0].tokens,
            (std::vector<plan::TokenId>{3, 90, 7, 8, 91, 0, 90, 9, 91, 1}));
}

TEST(CallGraph, AFailedCallLeavesItsConsumersUnresolvable) {
  plan::Plan plan;
  addCall(plan, {1});
  addCall(plan, {2}, {0});
  CallGraph graph;
  graph.reset(&plan);
  llvm::SmallVector<plan::CallId, 4> ready;
  graph.addCalls(0, ready);
  ready.clear();
  graph.markDone(0, std::nullopt, ready);
  // Ready (its dependency is done) but its prompt cannot be built: the
  // scheduler fails it at admission.
  EXPECT_EQ(ready, (llvm::SmallVector<plan::CallId, 4>{1}));
  EXPECT_FALSE(graph.resolve(1).has_value());
}

TEST(CallGraph, CallsAddedLaterServeTheirRequestAndSeeFinishedOutputs) {
  plan::Plan plan;
  addCall(plan, {1});
  CallGraph graph;
  graph.reset(&plan);
  llvm::SmallVector<plan::CallId, 4> ready;
  graph.addCalls(0, ready);
  ready.clear();
  graph.markDone(0, CallGraph::Tokens{5}, ready);
  // A server appends another request's call that splices in call 0's
  // output: already done, so it is ready at once.
  addCall(plan, {2}, {0});
  graph.addCalls(7, ready);
  EXPECT_EQ(ready, (llvm::SmallVector<plan::CallId, 4>{1}));
  EXPECT_EQ(graph.requestOf(0), 0u);
  EXPECT_EQ(graph.requestOf(1), 7u);
  EXPECT_TRUE(graph.isDone(0));
  EXPECT_FALSE(graph.isDone(1));
  EXPECT_TRUE(graph.resolve(1).has_value());
}

TEST(CallGraph, ACallCancelledBeforeItWasReadyCountsFromThen) {
  plan::Plan plan;
  addCall(plan, {1});
  addCall(plan, {2}, {0});
  CallGraph graph;
  graph.reset(&plan);
  llvm::SmallVector<plan::CallId, 4> ready;
  graph.addCalls(0, ready);
  EXPECT_EQ(graph.readyAt(1), CallGraph::Clock::time_point());
  graph.markReadyNow(1);
  const CallGraph::Clock::time_point first = graph.readyAt(1);
  EXPECT_NE(first, CallGraph::Clock::time_point());
  graph.markReadyNow(1); // keeps the first time
  EXPECT_EQ(graph.readyAt(1), first);
  // Cancelled (done) before its dependency finished: never reported ready.
  graph.markDone(1, std::nullopt, ready);
  ready.clear();
  graph.markDone(0, CallGraph::Tokens{3}, ready);
  EXPECT_TRUE(ready.empty());
}

} // namespace
