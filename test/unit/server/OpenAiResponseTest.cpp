//===- OpenAiResponseTest.cpp - Answers byte for byte as OpenAI's ---------===//
//
// The chunks and whole answers of the chat and completion endpoints, as
// exact text: clients parse these bytes, so a change to them is a change to
// the wire, not a refactoring. Keys come out sorted (nlohmann's object is a
// std::map). The synthetic ChatML tokenizer spells the logprobs' tokens.
//
//===----------------------------------------------------------------------===//

#include "server/OpenAiResponse.h"

#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"
#include "server/ServerSentEvents.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace spanc::server {
namespace {

using nlohmann::json;

OpenAiAnswer chatAnswer() {
  return {Endpoint::ChatCompletions, "chatcmpl-1", "smol", 1700000000};
}

OpenAiAnswer completionAnswer() {
  return {Endpoint::Completions, "cmpl-1", "smol", 1700000000};
}

TEST(OpenAiResponse, ChatChunksNameTheRoleThenCarryDeltas) {
  const std::string tail =
      R"("created":1700000000,"id":"chatcmpl-1","model":"smol",)"
      R"("object":"chat.completion.chunk"})";
  EXPECT_EQ(openAiRoleChunk(chatAnswer(), 0),
            R"({"choices":[{"delta":{"content":"","role":"assistant"},)"
            R"("finish_reason":null,"index":0,"logprobs":null}],)" +
                tail);
  EXPECT_EQ(openAiTextChunk(chatAnswer(), 1, "Hi"),
            R"({"choices":[{"delta":{"content":"Hi"},"finish_reason":null,)"
            R"("index":1,"logprobs":null}],)" +
                tail);
  EXPECT_EQ(openAiFinishChunk(chatAnswer(), 1, "length"),
            R"({"choices":[{"delta":{},"finish_reason":"length","index":1,)"
            R"("logprobs":null}],)" +
                tail);
}

TEST(OpenAiResponse, CompletionChunksCarryText) {
  const std::string tail =
      R"("created":1700000000,"id":"cmpl-1","model":"smol",)"
      R"("object":"text_completion"})";
  EXPECT_EQ(openAiTextChunk(completionAnswer(), 0, "Hi"),
            R"({"choices":[{"finish_reason":null,"index":0,"logprobs":null,)"
            R"("text":"Hi"}],)" +
                tail);
  EXPECT_EQ(openAiFinishChunk(completionAnswer(), 0, "stop"),
            R"({"choices":[{"finish_reason":"stop","index":0,"logprobs":null,)"
            R"("text":""}],)" +
                tail);
}

TEST(OpenAiResponse, UsageCountsTotalAndCachedTokens) {
  TokenUsage usage{10, 4, 6};
  EXPECT_EQ(openAiUsageChunk(chatAnswer(), usage),
            R"({"choices":[],"created":1700000000,"id":"chatcmpl-1",)"
            R"("model":"smol","object":"chat.completion.chunk",)"
            R"("usage":{"completion_tokens":4,"prompt_tokens":10,)"
            R"("prompt_tokens_details":{"cached_tokens":6},)"
            R"("total_tokens":14}})");
}

TEST(OpenAiResponse, InvalidUtf8BecomesTheReplacementCharacter) {
  EXPECT_EQ(json::parse(openAiTextChunk(completionAnswer(), 0,
                                        "a\xC3"))["choices"][0]["text"],
            "a\xEF\xBF\xBD");
}

TEST(OpenAiResponse, UsageCountsEachPromptsCacheHitsOnce) {
  ResponseStream stream(4, Clock::now());
  for (size_t choice = 0; choice < 4; ++choice) {
    ChoiceResult result;
    result.succeeded = true;
    result.stats.generatedTokens = 3;
    result.stats.reusedTokens = 5 + choice;
    stream.finishChoice(choice, result);
  }
  // Two prompts, two choices each: choices 0 and 2 are each prompt's first.
  TokenUsage usage = openAiUsage({7, 9}, stream, 2);
  EXPECT_EQ(usage.promptTokens, 16u);
  EXPECT_EQ(usage.completionTokens, 12u);
  EXPECT_EQ(usage.cachedTokens, 5u + 7u);
}

TEST(ServerSentEvents, AnEventIsDataAndABlankLine) {
  EXPECT_EQ(formatEvent("[DONE]"), "data: [DONE]\n\n");
  EXPECT_EQ(formatEvent(R"({"a":1})"), "data: {\"a\":1}\n\n");
}

class OpenAiWholeAnswerTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto file =
        model::GgufFile::open("test/data/synthetic/tiny-chatml-synthetic.gguf");
    ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
    gguf = std::move(*file);
    auto tokens = model::Tokenizer::fromGguf(*gguf);
    ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
    tokenizer = std::move(*tokens);
  }

  std::unique_ptr<model::GgufFile> gguf;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

TEST_F(OpenAiWholeAnswerTest, AChatCompletionHasMessagesAndUsage) {
  std::vector<OpenAiChoice> choices = {{"Hello", "stop", nullptr},
                                       {"Hi", "length", nullptr}};
  EXPECT_EQ(openAiWholeAnswer(chatAnswer(), choices, {3, 2, 1}, *tokenizer),
            R"({"choices":[{"finish_reason":"stop","index":0,"logprobs":null,)"
            R"("message":{"content":"Hello","role":"assistant"}},)"
            R"({"finish_reason":"length","index":1,"logprobs":null,)"
            R"("message":{"content":"Hi","role":"assistant"}}],)"
            R"("created":1700000000,"id":"chatcmpl-1","model":"smol",)"
            R"("object":"chat.completion","usage":{"completion_tokens":2,)"
            R"("prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":1},)"
            R"("total_tokens":5}})");
}

TEST_F(OpenAiWholeAnswerTest, LogprobsStopAtTheTextAnswered) {
  const plan::TokenId first = 300, second = 301, other = 302;
  const std::string firstPiece = tokenizer->tokenToPiece(first, false);
  const std::string secondPiece = tokenizer->tokenToPiece(second, false);
  ASSERT_FALSE(firstPiece.empty());
  ChoiceResult result;
  result.tokens = {first, second};
  result.logprobs = {{-0.5f, {{other, -1.0f}}}, {-0.25f, {}}};
  // A stop string cut the second token off: only the first is answered.
  std::vector<OpenAiChoice> choices = {{firstPiece, "stop", &result}};

  json completion = json::parse(
      openAiWholeAnswer(completionAnswer(), choices, {}, *tokenizer));
  const json &logprobs = completion["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], json::array({firstPiece}));
  EXPECT_EQ(logprobs["token_logprobs"], json::array({-0.5}));
  EXPECT_EQ(logprobs["text_offset"], json::array({0}));
  // The sampled token is among the top ones, as OpenAI answers.
  EXPECT_EQ(logprobs["top_logprobs"][0][firstPiece], -0.5);
  EXPECT_EQ(logprobs["top_logprobs"][0][tokenizer->tokenToPiece(other, false)],
            -1.0);

  json chat =
      json::parse(openAiWholeAnswer(chatAnswer(), choices, {}, *tokenizer));
  const json &content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], firstPiece);
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 1u);
  EXPECT_TRUE(chat["choices"][0]["logprobs"]["refusal"].is_null());
}

} // namespace
} // namespace spanc::server
