//===- CompletionRequestTest.cpp - OpenAI request bodies, parsed ----------===//
//
// What parseCompletionRequest accepts and how it refuses: every malformed
// or out-of-range field is an ApiError with the status and field (param)
// an OpenAI client expects; JSON syntax errors name line and column.
//
//===----------------------------------------------------------------------===//

#include "server/CompletionRequest.h"

#include "server/ApiError.h"

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

RequestLimits limits() {
  RequestLimits result;
  result.models = ModelNames({"tiny", "tiny-alias"});
  result.maxTokensLimit = 100;
  result.defaultMaxTokens = 16;
  result.maxChoices = 4;
  result.maxPrompts = 3;
  return result;
}

/// The ApiError of a body that must be refused.
ApiError refuse(const std::string &body,
                Endpoint endpoint = Endpoint::ChatCompletions) {
  auto request = parseCompletionRequest(body, endpoint, limits());
  EXPECT_FALSE(bool(request)) << "accepted: " << body;
  if (request)
    return ApiError(0, "");
  return toApiError(request.takeError());
}

TEST(CompletionRequest, ReadsEveryChatField) {
  auto request = parseCompletionRequest(
      R"({"model": "tiny", "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"},
                                          {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"}],
          "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 42,
          "stop": ["x", "", "yz"], "n": 2, "stream": true,
          "stream_options": {"include_usage": true}, "unknown": 1})",
      Endpoint::ChatCompletions, limits());
  ASSERT_TRUE(bool(request)) << llvm::toString(request.takeError());
  ASSERT_EQ(request->messages.size(), 3u);
  EXPECT_EQ(request->messages[0].role, plan::MessageRole::System);
  EXPECT_EQ(request->messages[1].content, "ab");
  EXPECT_EQ(request->messages[2].role, plan::MessageRole::Assistant);
  EXPECT_EQ(request->maxTokens, 7);
  EXPECT_DOUBLE_EQ(request->temperature, 0.5);
  EXPECT_DOUBLE_EQ(request->topP, 0.9);
  EXPECT_EQ(request->seed, std::optional<uint64_t>(42));
  EXPECT_EQ(request->stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(request->n, 2);
  EXPECT_TRUE(request->stream);
  EXPECT_TRUE(request->includeUsage);
}

TEST(CompletionRequest, DefaultsFollowTheServersLimits) {
  auto request = parseCompletionRequest(R"({"prompt": ["p", "q"]})",
                                        Endpoint::Completions, limits());
  ASSERT_TRUE(bool(request)) << llvm::toString(request.takeError());
  EXPECT_EQ(request->prompts, (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(request->model, "tiny");
  EXPECT_EQ(request->maxTokens, 16);
  EXPECT_DOUBLE_EQ(request->temperature, 1.0);
  EXPECT_EQ(request->n, 1);
  EXPECT_FALSE(request->stream);
}

TEST(CompletionRequest, MaxCompletionTokensIsChatsNewerName) {
  auto request = parseCompletionRequest(
      R"({"messages": [{"role": "user", "content": "a"}],
          "max_completion_tokens": 9})",
      Endpoint::ChatCompletions, limits());
  ASSERT_TRUE(bool(request)) << llvm::toString(request.takeError());
  EXPECT_EQ(request->maxTokens, 9);
  EXPECT_EQ(request->maxTokensField, "max_completion_tokens");
}

TEST(CompletionRequest, MaxCompletionTokensWinsOverMaxTokensOnBothEndpoints) {
  // vLLM reads `max_completion_tokens or max_tokens`; spnl's openai/ route
  // sends the newer name alone, other clients send both.
  auto chat = parseCompletionRequest(
      R"({"messages": [{"role": "user", "content": "a"}],
          "max_tokens": 50, "max_completion_tokens": 3})",
      Endpoint::ChatCompletions, limits());
  ASSERT_TRUE(bool(chat)) << llvm::toString(chat.takeError());
  EXPECT_EQ(chat->maxTokens, 3);
  auto completion = parseCompletionRequest(
      R"({"prompt": "a", "max_tokens": 50, "max_completion_tokens": 4})",
      Endpoint::Completions, limits());
  ASSERT_TRUE(bool(completion)) << llvm::toString(completion.takeError());
  EXPECT_EQ(completion->maxTokens, 4);
  // A null newer name leaves max_tokens in charge.
  auto nulled = parseCompletionRequest(
      R"({"prompt": "a", "max_tokens": 5, "max_completion_tokens": null})",
      Endpoint::Completions, limits());
  ASSERT_TRUE(bool(nulled)) << llvm::toString(nulled.takeError());
  EXPECT_EQ(nulled->maxTokens, 5);
  EXPECT_EQ(nulled->maxTokensField, "max_tokens");
}

TEST(CompletionRequest, BothTokenLimitsAreCheckedAndNamed) {
  ApiError over = refuse(R"({"messages": [{"role": "user", "content": "a"}],
                             "max_completion_tokens": 101})");
  EXPECT_EQ(over.status(), 400);
  EXPECT_EQ(over.param(), "max_completion_tokens");
  // The one that loses is still checked: a wrong value is never carried
  // along unseen.
  ApiError losing = refuse(R"({"messages": [{"role": "user", "content": "a"}],
                               "max_tokens": "ten",
                               "max_completion_tokens": 5})");
  EXPECT_EQ(losing.param(), "max_tokens");
}

TEST(CompletionRequest, ReasoningEffortIsReadAndIgnored) {
  // spnl's openai/ route sends "low" with every chat.
  for (const char *effort : {"\"low\"", "\"high\"", "\"none\"", "null"}) {
    auto request = parseCompletionRequest(
        std::string(R"({"messages": [{"role": "user", "content": "a"}],
                        "reasoning_effort": )") +
            effort + "}",
        Endpoint::ChatCompletions, limits());
    EXPECT_TRUE(bool(request))
        << effort << ": " << llvm::toString(request.takeError());
  }
  for (const char *effort : {"\"extreme\"", "3"}) {
    ApiError error =
        refuse(std::string(R"({"messages": [{"role": "user", "content": "a"}],
                               "reasoning_effort": )") +
               effort + "}");
    EXPECT_EQ(error.status(), 400) << effort;
    EXPECT_EQ(error.param(), "reasoning_effort") << effort;
  }
}

TEST(CompletionRequest, AModelMatchesAnyServedNameInAnyCaseWithOrWithoutGguf) {
  for (const char *model : {"tiny", "TINY", "tiny.gguf", "Tiny.GGUF"}) {
    auto request = parseCompletionRequest(
        std::string(R"({"prompt": "a", "model": ")") + model + "\"}",
        Endpoint::Completions, limits());
    ASSERT_TRUE(bool(request))
        << model << ": " << llvm::toString(request.takeError());
    // Answered under the served name it matched.
    EXPECT_EQ(request->model, "tiny") << model;
  }
  auto alias =
      parseCompletionRequest(R"({"prompt": "a", "model": "Tiny-Alias"})",
                             Endpoint::Completions, limits());
  ASSERT_TRUE(bool(alias)) << llvm::toString(alias.takeError());
  EXPECT_EQ(alias->model, "tiny-alias");
  ApiError error =
      refuse(R"({"prompt": "a", "model": "tin"})", Endpoint::Completions);
  EXPECT_EQ(error.status(), 404);
  EXPECT_EQ(error.param(), "model");
  EXPECT_NE(error.detail().find("serves 'tiny', 'tiny-alias'"),
            std::string::npos)
      << error.detail();
}

TEST(CompletionRequest, MalformedJsonIsA400WithLineAndColumn) {
  ApiError error = refuse("{\"messages\": [\n  {\"role\": }]}");
  EXPECT_EQ(error.status(), 400);
  EXPECT_NE(error.detail().find("line 2, column 12"), std::string::npos)
      << error.detail();
}

TEST(CompletionRequest, NestingPastTheLimitIsA400BeforeAnyDocumentIsBuilt) {
  // Inside a message, where a walk over the fields would never look.
  std::string deep = R"({"messages": [{"role": "user", "content": )";
  ApiError error = refuse(deep + std::string(100000, '[') + "]}]}");
  EXPECT_EQ(error.status(), 400);
  // Level 257 is the 254th '[' (three levels open before it).
  EXPECT_EQ(error.detail(), "the body is not valid JSON: nested deeper than "
                            "256 levels at line 1, column " +
                                std::to_string(deep.size() + 254));
  // 256 levels are JSON like any other (and the content is then wrong).
  std::string within =
      deep + std::string(253, '[') + std::string(253, ']') + "}]}";
  EXPECT_EQ(refuse(within).status(), 400);
  EXPECT_EQ(refuse(within).detail().find("nested deeper"), std::string::npos);
}

TEST(CompletionRequest, UnknownModelIsA404) {
  ApiError error = refuse(R"({"model": "gpt-4", "messages": [{"role": "user",
                 "content": "a"}]})");
  EXPECT_EQ(error.status(), 404);
  EXPECT_EQ(error.param(), "model");
}

TEST(CompletionRequest, OutOfRangeFieldsAre400sNamingTheField) {
  const std::string messages =
      R"("messages": [{"role": "user", "content": "a"}])";
  struct Case {
    std::string fields;
    std::string param;
  } cases[] = {
      {R"("max_tokens": 101)", "max_tokens"},
      {R"("max_tokens": 0)", "max_tokens"},
      {R"("max_tokens": "5")", "max_tokens"},
      {R"("max_tokens": 18446744073709551615)", "max_tokens"},
      {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": "hot")", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("n": 5)", "n"},
      {R"("stop": [1])", "stop"},
      {R"("stop": ["a", "b", "c", "d", "e"])", "stop"},
      {R"("stream": "yes")", "stream"},
      {R"("stream_options": {"include_usage": 1})",
       "stream_options.include_usage"},
  };
  for (const Case &test : cases) {
    ApiError error = refuse("{" + messages + ", " + test.fields + "}");
    EXPECT_EQ(error.status(), 400) << test.fields;
    EXPECT_EQ(error.param(), test.param) << test.fields;
  }
}

TEST(CompletionRequest, FieldsNotHonouredAre400sNamingTheField) {
  // Each was answered 200 as if honoured (issue 25, point 9).
  const std::string messages =
      R"("messages": [{"role": "user", "content": "a"}])";
  const std::string prompt = R"("prompt": "a")";
  struct Case {
    Endpoint endpoint;
    std::string fields;
    std::string param;
  } cases[] = {
      {Endpoint::ChatCompletions,
       R"("tools": [{"type": "function", "function": {"name": "f"}}])",
       "tools"},
      {Endpoint::ChatCompletions, R"("tool_choice": "required")",
       "tool_choice"},
      {Endpoint::ChatCompletions, R"("functions": [{"name": "f"}])",
       "functions"},
      {Endpoint::ChatCompletions,
       R"("response_format": {"type": "json_object"})", "response_format"},
      {Endpoint::ChatCompletions,
       R"("response_format": {"type": "json_schema", "json_schema": {}})",
       "response_format"},
      {Endpoint::ChatCompletions, R"("presence_penalty": 0.5)",
       "presence_penalty"},
      {Endpoint::Completions, R"("frequency_penalty": -1)",
       "frequency_penalty"},
      {Endpoint::Completions, R"("echo": true)", "echo"},
      {Endpoint::Completions, R"("suffix": "end")", "suffix"},
      {Endpoint::Completions, R"("best_of": 3)", "best_of"},
      {Endpoint::ChatCompletions, R"("logit_bias": {"x": 1})", "logit_bias"},
      {Endpoint::ChatCompletions, R"("logit_bias": {"3": 100.5})",
       "logit_bias"},
      {Endpoint::ChatCompletions, R"("logit_bias": {"629": 1})", "logit_bias"},
      {Endpoint::ChatCompletions, R"("logit_bias": [1])", "logit_bias"},
      {Endpoint::ChatCompletions, R"("top_logprobs": 2)", "top_logprobs"},
      {Endpoint::ChatCompletions, R"("logprobs": true, "top_logprobs": 21)",
       "top_logprobs"},
      {Endpoint::ChatCompletions, R"("logprobs": true, "stream": true)",
       "logprobs"},
      {Endpoint::Completions, R"("logprobs": 21)", "logprobs"},
  };
  for (const Case &test : cases) {
    const std::string &first =
        test.endpoint == Endpoint::ChatCompletions ? messages : prompt;
    RequestLimits bounded = limits();
    bounded.vocabSize = 629;
    auto request = parseCompletionRequest(
        "{" + first + ", " + test.fields + "}", test.endpoint, bounded);
    ASSERT_FALSE(bool(request)) << "accepted: " << test.fields;
    ApiError error = toApiError(request.takeError());
    EXPECT_EQ(error.status(), 400) << test.fields;
    EXPECT_EQ(error.param(), test.param) << test.fields;
    EXPECT_NE(error.detail().find(test.param), std::string::npos)
        << error.detail();
  }
  ApiError toolCall =
      refuse(R"({"messages": [{"role": "assistant", "content": "",
                 "tool_calls": [{"id": "a"}]}]})");
  EXPECT_EQ(toolCall.param(), "messages[0].tool_calls");
}

TEST(CompletionRequest, DefaultsOfUnhonouredFieldsAndSupportedOnesAreRead) {
  auto chat = parseCompletionRequest(
      R"({"messages": [{"role": "user", "content": "a"}], "tools": [],
          "tool_choice": "none", "response_format": {"type": "text"},
          "presence_penalty": 0, "frequency_penalty": 0.0,
          "logit_bias": {"5": -100, "7": 2.5}, "logprobs": true,
          "top_logprobs": 3, "top_k": -1})",
      Endpoint::ChatCompletions, limits());
  ASSERT_TRUE(bool(chat)) << llvm::toString(chat.takeError());
  EXPECT_EQ(chat->logitBias,
            (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(chat->logprobs, std::optional<int64_t>(3));
  EXPECT_EQ(chat->topK, 0);
  auto completion = parseCompletionRequest(
      R"({"prompt": "a", "echo": false, "suffix": "", "best_of": 2, "n": 2,
          "logprobs": 0, "top_k": 4})",
      Endpoint::Completions, limits());
  ASSERT_TRUE(bool(completion)) << llvm::toString(completion.takeError());
  EXPECT_EQ(completion->logprobs, std::optional<int64_t>(0));
  EXPECT_EQ(completion->topK, 4);
  auto none = parseCompletionRequest(
      R"({"messages": [{"role": "user", "content": "a"}], "logprobs": false})",
      Endpoint::ChatCompletions, limits());
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(none->logprobs.has_value());
}

TEST(CompletionRequest, BadMessagesAndPromptsAre400s) {
  EXPECT_EQ(refuse(R"({})").param(), "messages");
  EXPECT_EQ(refuse(R"({"messages": []})").param(), "messages");
  EXPECT_EQ(
      refuse(R"({"messages": [{"role": "tool", "content": "a"}]})").param(),
      "messages[0].role");
  EXPECT_EQ(
      refuse(R"({"messages": [{"role": "user", "content": null}]})").param(),
      "messages[0].content");
  EXPECT_EQ(refuse(R"({"messages": [{"role": "user", "content":
                       [{"type": "image_url"}]}]})")
                .param(),
            "messages[0].content");
  EXPECT_EQ(refuse(R"([1, 2])").status(), 400);
  EXPECT_EQ(refuse(R"({"prompt": [1, -2]})", Endpoint::Completions).param(),
            "prompt");
  EXPECT_EQ(refuse(R"({"prompt": [[1], "a"]})", Endpoint::Completions).param(),
            "prompt");
  EXPECT_EQ(refuse(R"({"prompt": [[]]})", Endpoint::Completions).param(),
            "prompt");
  EXPECT_EQ(refuse(R"({"prompt": ["a", "b", "c", "d"]})", Endpoint::Completions)
                .param(),
            "prompt");
}

TEST(CompletionRequest, TokenIdPromptsAreTakenAsGiven) {
  auto one = parseCompletionRequest(R"({"prompt": [5, 0, 7]})",
                                    Endpoint::Completions, limits());
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  ASSERT_EQ(one->promptTokens.size(), 1u);
  EXPECT_EQ(one->promptTokens[0], (std::vector<int32_t>{5, 0, 7}));
  auto two = parseCompletionRequest(R"({"prompt": [[1, 2], [3]]})",
                                    Endpoint::Completions, limits());
  ASSERT_TRUE(bool(two)) << llvm::toString(two.takeError());
  ASSERT_EQ(two->promptTokens.size(), 2u);
  EXPECT_EQ(two->prompts.size(), 2u);
  EXPECT_EQ(two->promptTokens[1], (std::vector<int32_t>{3}));
  RequestLimits small = limits();
  small.vocabSize = 10;
  auto outside = parseCompletionRequest(R"({"prompt": [3, 10]})",
                                        Endpoint::Completions, small);
  ASSERT_FALSE(bool(outside));
  EXPECT_EQ(toApiError(outside.takeError()).param(), "prompt");
}

TEST(ApiError, BodyIsOpenAisShape) {
  ApiError error(429, "full \"now\"");
  EXPECT_EQ(error.body(),
            R"({"error":{"code":"queue_full","message":"full \"now\"",)"
            R"("param":null,"type":"rate_limit_error"}})");
  EXPECT_STREQ(ApiError(401, "").type(), "authentication_error");
  EXPECT_STREQ(ApiError(413, "").code(), "request_too_large");
  // Another error becomes a 500 with its message.
  ApiError other = toApiError(
      llvm::createStringError(llvm::inconvertibleErrorCode(), "disk on fire"));
  EXPECT_EQ(other.status(), 500);
  EXPECT_EQ(other.detail(), "disk on fire");
}

} // namespace
} // namespace spanc::server
