//===- SpnlExecuteTest.cpp - spnl's /v1/query/execute request and answers -===//
//
// The shapes spnl's client reads: every streamed chunk parses both as a
// completion chunk (choices[].text, what newer clients read) and as a chat
// chunk (choices[].delta.content, what older ones read), with the choice's
// index; the whole answer is a completion for a map bulk and a chat
// completion otherwise, one choice per model output in result order.
//
//===----------------------------------------------------------------------===//

#include "server/SpnlExecute.h"

#include "server/ApiError.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

using nlohmann::json;

TEST(SpnlExecute, StreamIsTrueOrFalseAndFalseWhenAbsent) {
  EXPECT_FALSE(*parseStreamParam(false, ""));
  EXPECT_FALSE(*parseStreamParam(true, "false"));
  EXPECT_TRUE(*parseStreamParam(true, "true"));
  auto bad = parseStreamParam(true, "yes");
  ASSERT_FALSE(bool(bad));
  ApiError error = toApiError(bad.takeError());
  EXPECT_EQ(error.status(), 400);
  EXPECT_EQ(error.param(), "stream");
}

TEST(SpnlExecute, OnlyAMapBulkReadsAsACompletion) {
  EXPECT_TRUE(readsAsCompletion(R"({"Map": {"inputs": []}})"));
  EXPECT_TRUE(readsAsCompletion(R"({"bulk": {"map": {"inputs": []}}})"));
  EXPECT_FALSE(readsAsCompletion(R"({"Repeat": {"n": 2}})"));
  EXPECT_FALSE(readsAsCompletion(R"({"bulk": {"Repeat": {"n": 2}}})"));
  EXPECT_FALSE(readsAsCompletion(R"({"g": {"input": {"user": "x"}}})"));
  EXPECT_FALSE(readsAsCompletion("not json"));
}

TEST(SpnlExecute, ChoicesAreTheModelOutputsAmongTheResultsInOrder) {
  plan::Plan plan;
  plan::QueryPlan query;
  query.results = {{plan::CallId(2), ""},
                   {std::nullopt, "a literal"},
                   {plan::CallId(0), ""},
                   {plan::CallId(0), ""}};
  plan.queries.push_back(query);
  EXPECT_EQ(spnlChoices(plan), (std::vector<plan::CallId>{2, 0, 0}));
}

TEST(SpnlExecute, AChunkReadsAsACompletionAndAsAChatChunk) {
  SpnlAnswer answer{"cmpl-1", "smol", 1700000000};
  json chunk = json::parse(spnlChunk(answer, 3, "Hello", nullptr));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["id"], "cmpl-1");
  EXPECT_EQ(chunk["model"], "smol");
  EXPECT_EQ(chunk["created"], 1700000000);
  ASSERT_EQ(chunk["choices"].size(), 1u);
  const json &choice = chunk["choices"][0];
  EXPECT_EQ(choice["index"], 3);
  EXPECT_EQ(choice["text"], "Hello");
  EXPECT_EQ(choice["delta"]["content"], "Hello");
  EXPECT_TRUE(choice["finish_reason"].is_null());
  EXPECT_TRUE(choice.contains("logprobs"));

  json last = json::parse(spnlChunk(answer, 3, "", "length"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["text"], "");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
}

TEST(SpnlExecute, TheWholeAnswerIsACompletionOrAChatCompletion) {
  SpnlAnswer answer{"cmpl-2", "smol", 1};
  TokenUsage usage{10, 4, 6};
  json chat = json::parse(
      spnlWholeAnswer(answer, false, {"a", "b"}, {"stop", "length"}, usage));
  EXPECT_EQ(chat["object"], "chat.completion");
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][1]["message"]["content"], "b");
  EXPECT_EQ(chat["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"]["total_tokens"], 14);
  EXPECT_EQ(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 6);

  json completion =
      json::parse(spnlWholeAnswer(answer, true, {"x"}, {"stop"}, usage));
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["text"], "x");
  EXPECT_FALSE(completion["choices"][0].contains("message"));
}

} // namespace
} // namespace spanc::server
