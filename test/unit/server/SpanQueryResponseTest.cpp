//===- SpanQueryResponseTest.cpp - /v1/query's answer, byte for byte ------===//
//
// A span query's answer as exact text (keys sorted: nlohmann's object is a
// std::map): each query's results (a call's text, its error when it failed,
// literal text), each call's statistics and the usage summed over calls.
//
//===----------------------------------------------------------------------===//

#include "server/SpanQueryResponse.h"

#include "server/ResponseJson.h"

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

TEST(SpanQueryResponse, ListsResultsCallsAndTheSummedUsage) {
  plan::Plan plan;
  plan.calls.resize(2);
  plan.calls[0].id = 0;
  plan.calls[0].query = "q";
  plan.calls[0].location = "a.span:2:3";
  plan.calls[1].id = 1;
  plan.calls[1].query = "q";
  plan::QueryPlan query;
  query.name = "q";
  query.results.resize(3);
  query.results[0].call = 0;
  query.results[1].text = "lit";
  query.results[2].call = 1;
  plan.queries.push_back(query);

  ResponseStream stream(2, Clock::now());
  ChoiceResult first;
  first.succeeded = true;
  first.reason = FinishReason::Length;
  first.stats.promptTokens = 10;
  first.stats.reusedTokens = 4;
  first.stats.computedTokens = 6;
  first.stats.generatedTokens = 3;
  stream.finishChoice(0, first);
  ChoiceResult second;
  second.error = "cancelled";
  second.reason = FinishReason::Abort;
  second.stats.promptTokens = 5;
  second.stats.computedTokens = 5;
  stream.finishChoice(1, second);

  const std::string stats =
      R"("generated_tokens":%d,"id":%d,"location":"%s","preemptions":0,)"
      R"("prompt_tokens":%d,"query":"q","queued_seconds":0.0,)"
      R"("relocated_tokens":0,"reused_tokens":%d,"succeeded":%s,)"
      R"("total_seconds":0.0,"ttft_seconds":0.0})";
  char call0[512], call1[512];
  std::snprintf(call0, sizeof(call0), stats.c_str(), 3, 0, "a.span:2:3", 10, 4,
                "true");
  std::snprintf(call1, sizeof(call1), stats.c_str(), 0, 1, "", 5, 0, "false");
  EXPECT_EQ(
      spanQueryAnswer(plan, {"Hello", ""}, stream, "smol"),
      std::string(R"({"calls":[{"cache_only":false,"computed_tokens":6,)") +
          R"("error":"","finish_reason":"length",)" + call0 +
          R"(,{"cache_only":false,"computed_tokens":5,)" +
          R"("error":"cancelled","finish_reason":"abort",)" + call1 +
          R"(],"model":"smol","object":"span.query","queries":[{"name":"q",)"
          R"("results":[{"call":0,"text":"Hello"},{"text":"lit"},)"
          R"({"call":1,"error":"cancelled","text":""}]}],)"
          R"("usage":{"completion_tokens":3,"prompt_tokens":15,)"
          R"("prompt_tokens_details":{"cached_tokens":4},"total_tokens":18}})");
}

TEST(ResponseJson, AStopStringIsAStopWhateverTheEngineSaw) {
  ChoiceResult result;
  result.reason = FinishReason::Length;
  EXPECT_STREQ(finishReasonName(result), "length");
  EXPECT_STREQ(finishReasonName(result, /*stoppedByString=*/true), "stop");
  result.reason = FinishReason::Abort;
  EXPECT_STREQ(finishReasonName(result), "abort");
}

} // namespace
} // namespace spanc::server
