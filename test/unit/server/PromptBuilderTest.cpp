//===- PromptBuilderTest.cpp - The calls an OpenAI request makes ----------===//
//
// On the synthetic ChatML tokenizer and template the build generates: a
// chat request's prompt is token for token the prompt spanc lowers for a
// span query over the same messages (so they share blocks), a completions
// prompt parses special tokens and each prompt gets n calls, and prompts
// past the limits are 400s naming the field.
//
//===----------------------------------------------------------------------===//

#include "server/PromptBuilder.h"

#include "codegen/CompilePipeline.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"
#include "server/ApiError.h"

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

class PromptBuilderTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto file =
        model::GgufFile::open("test/data/synthetic/tiny-chatml-synthetic.gguf");
    ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
    gguf = std::move(*file);
    auto tokens = model::Tokenizer::fromGguf(*gguf);
    ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
    tokenizer = std::move(*tokens);
    auto chat = model::ChatTemplate::fromGguf(*gguf, *tokenizer);
    ASSERT_TRUE(bool(chat)) << llvm::toString(chat.takeError());
    chatTemplate = std::make_unique<model::ChatTemplate>(std::move(*chat));
    encoder =
        std::make_unique<model::ChatTemplateEncoder>(*chatTemplate, *tokenizer);
  }

  static std::vector<plan::TokenId> flatten(const plan::Call &call) {
    std::vector<plan::TokenId> tokens;
    for (const plan::PlanSegment &segment : call.segments)
      for (const plan::Piece &piece : segment.pieces)
        tokens.insert(tokens.end(), piece.tokens.begin(), piece.tokens.end());
    return tokens;
  }

  CompletionRequest chat(std::vector<ChatMessage> messages) {
    CompletionRequest request;
    request.endpoint = Endpoint::ChatCompletions;
    request.messages = std::move(messages);
    request.maxTokens = 8;
    request.temperature = 0;
    return request;
  }

  std::unique_ptr<model::GgufFile> gguf;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<model::ChatTemplate> chatTemplate;
  std::unique_ptr<model::ChatTemplateEncoder> encoder;
};

TEST_F(PromptBuilderTest, ChatPromptIsTheSpanQuerysPrompt) {
  auto lowered = codegen::compileToPlan(
      R"(query q {
           gen(max_tokens = 8, temperature = 0) {
             system "You answer briefly."
             user "What is a span?"
           }
         })",
      "chat.span", *encoder);
  ASSERT_TRUE(bool(lowered)) << llvm::toString(lowered.takeError());
  ASSERT_EQ(lowered->calls.size(), 1u);

  auto calls =
      buildCalls(chat({{plan::MessageRole::System, "You answer briefly."},
                       {plan::MessageRole::User, "What is a span?"}}),
                 *encoder, *tokenizer, {});
  ASSERT_TRUE(bool(calls)) << llvm::toString(calls.takeError());
  ASSERT_EQ(calls->calls.size(), 1u);
  const plan::Call &call = calls->calls[0];
  ASSERT_EQ(call.segments.size(), 1u);
  EXPECT_EQ(call.segments[0].kind, plan::SegmentKind::Prefix);
  EXPECT_EQ(flatten(call), flatten(lowered->calls[0]));
  EXPECT_EQ(calls->promptTokens[0], flatten(call).size());
  EXPECT_EQ(call.options.maxTokens, 8);
  EXPECT_EQ(call.options.temperature, 0.0);
}

TEST_F(PromptBuilderTest, CompletionPromptsParseSpecialTokensAndGetNCalls) {
  CompletionRequest request;
  request.endpoint = Endpoint::Completions;
  request.prompts = {"<|im_start|>user\nhi", "plain"};
  request.n = 3;
  request.maxTokens = 4;
  request.seed = 10;
  request.stop = {"."};
  auto calls = buildCalls(request, *encoder, *tokenizer, {});
  ASSERT_TRUE(bool(calls)) << llvm::toString(calls.takeError());
  ASSERT_EQ(calls->calls.size(), 6u);
  std::vector<plan::TokenId> first = flatten(calls->calls[0]);
  ASSERT_FALSE(first.empty());
  // <|im_start|> is one token (id 1 in the synthetic vocabulary).
  EXPECT_EQ(first[0], 1);
  EXPECT_EQ(flatten(calls->calls[2]), first);
  EXPECT_EQ(flatten(calls->calls[3]), tokenizer->encode("plain", true));
  // Choices of a seeded request: distinct, reproducible seeds.
  EXPECT_EQ(calls->calls[0].options.seed, 10u);
  EXPECT_EQ(calls->calls[1].options.seed, 11u);
  EXPECT_EQ(calls->calls[5].options.stop, std::vector<std::string>{"."});
}

TEST_F(PromptBuilderTest, PromptsPastTheLimitsAre400s) {
  auto request = chat({{plan::MessageRole::User, "a fairly long question"}});
  PromptLimits limits;
  limits.maxPromptTokens = 5;
  auto tooLong = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_FALSE(bool(tooLong));
  ApiError error = toApiError(tooLong.takeError());
  EXPECT_EQ(error.status(), 400);
  EXPECT_EQ(error.param(), "messages");

  // The prompt fits the context, prompt + max_tokens does not.
  const int64_t prompt = int64_t(
      buildCalls(request, *encoder, *tokenizer, {})->promptTokens.at(0));
  limits.maxPromptTokens = 0;
  limits.contextLength = prompt + 10;
  request.maxTokens = 16;
  auto pastContext = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_FALSE(bool(pastContext));
  error = toApiError(pastContext.takeError());
  EXPECT_EQ(error.status(), 400);
  EXPECT_EQ(error.param(), "max_tokens");

  // Asked as max_completion_tokens, the error names what was sent.
  request.maxTokensField = "max_completion_tokens";
  auto newerName = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_FALSE(bool(newerName));
  error = toApiError(newerName.takeError());
  EXPECT_EQ(error.param(), "max_completion_tokens");
  EXPECT_NE(error.detail().find("and max_completion_tokens 16 exceed"),
            std::string::npos)
      << error.detail();
}

TEST_F(PromptBuilderTest, ErrorsNameTheLimitThatApplies) {
  auto request = chat({{plan::MessageRole::User, "a fairly long question"}});
  request.maxTokens = 4;
  // Unset, --max-prompt-tokens is not cited (it was, as the context).
  PromptLimits limits;
  limits.contextLength = 5;
  auto pastContext = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_FALSE(bool(pastContext));
  ApiError error = toApiError(pastContext.takeError());
  EXPECT_EQ(error.param(), "messages");
  EXPECT_NE(error.detail().find("the model's context of 5 tokens"),
            std::string::npos)
      << error.detail();
  EXPECT_EQ(error.detail().find("--max-prompt-tokens"), std::string::npos)
      << error.detail();

  limits.contextLength = 0;
  limits.maxPromptTokens = 5;
  error =
      toApiError(buildCalls(request, *encoder, *tokenizer, limits).takeError());
  EXPECT_NE(error.detail().find("limit of 5 (--max-prompt-tokens)"),
            std::string::npos)
      << error.detail();
}

TEST_F(PromptBuilderTest, APromptPastTheKvCacheIsRefusedAndMaxTokensLowered) {
  auto request = chat({{plan::MessageRole::User, "a fairly long question"}});
  request.maxTokens = 100;
  auto plain = buildCalls(request, *encoder, *tokenizer, {});
  ASSERT_TRUE(bool(plain));
  const int64_t prompt = int64_t(plain->promptTokens[0]);

  PromptLimits limits;
  limits.kvCacheTokens = prompt - 1;
  auto refused = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_FALSE(bool(refused));
  ApiError error = toApiError(refused.takeError());
  EXPECT_EQ(error.status(), 400);
  EXPECT_NE(error.detail().find("the prompt has " + std::to_string(prompt) +
                                " tokens, more than the server's whole KV "
                                "cache of " +
                                std::to_string(prompt - 1) +
                                " tokens (--kv-cache)"),
            std::string::npos)
      << error.detail();

  // The prompt fits, prompt + max_tokens does not: what fits is generated.
  limits.kvCacheTokens = prompt + 10;
  auto lowered = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_TRUE(bool(lowered)) << llvm::toString(lowered.takeError());
  EXPECT_EQ(lowered->calls[0].options.maxTokens, 10);
  limits.kvCacheTokens = prompt;
  lowered = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_TRUE(bool(lowered));
  EXPECT_EQ(lowered->calls[0].options.maxTokens, 1);
  limits.kvCacheTokens = prompt + 1000;
  lowered = buildCalls(request, *encoder, *tokenizer, limits);
  ASSERT_TRUE(bool(lowered));
  EXPECT_EQ(lowered->calls[0].options.maxTokens, 100);
}

} // namespace
} // namespace spanc::server
