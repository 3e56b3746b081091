//===- SpanQueryTest.cpp - Span programs from the network, compiled -------===//
//
// On the synthetic ChatML tokenizer: a network program compiles to a plan
// whose nested calls name each other by index; file() is refused even for
// a file beside the server (its working folder), and the server's limits
// on calls and max_tokens are 400s before anything runs.
//
//===----------------------------------------------------------------------===//

#include "server/SpanQuery.h"

#include "retrieval/CorpusCatalog.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"
#include "server/ApiError.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace spanc::server {
namespace {

class SpanQueryTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto file = model::GgufFile::open(kModel);
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

  ApiError refuse(const std::string &source, SpanQueryLimits limits = {},
                  bool isJson = false) {
    auto plan = compileSpanQuery(source, isJson, {}, *encoder, limits);
    EXPECT_FALSE(bool(plan)) << "compiled: " << source;
    return plan ? ApiError(0, "") : toApiError(plan.takeError());
  }

  static constexpr const char *kModel =
      "test/data/synthetic/tiny-chatml-synthetic.gguf";
  std::unique_ptr<model::GgufFile> gguf;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<model::ChatTemplate> chatTemplate;
  std::unique_ptr<model::ChatTemplateEncoder> encoder;
};

TEST_F(SpanQueryTest, CompilesNestedCallsWithParams) {
  auto plan = compileSpanQuery(R"(param topic = "dogs"
query judge {
  gen(max_tokens = 6, temperature = 0) {
    system "Pick one."
    plus { repeat(2) { gen(max_tokens = 4, temperature = 0.8, seed = 1) {
      user topic } } }
    user "Which?"
  }
})",
                               false, {{"topic", "cats"}}, *encoder, {});
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->calls.size(), 3u);
  const plan::Call &judge = plan->calls.back();
  EXPECT_EQ(judge.dependencies.size(), 2u);
  for (plan::CallId dependency : judge.dependencies)
    EXPECT_LT(dependency, judge.id);
  // The override reached the inner calls' prompt.
  std::vector<plan::TokenId> cats = tokenizer->encode("cats", false);
  std::vector<plan::TokenId> prompt;
  for (const plan::PlanSegment &segment : plan->calls[0].segments)
    for (const plan::Piece &piece : segment.pieces)
      prompt.insert(prompt.end(), piece.tokens.begin(), piece.tokens.end());
  EXPECT_NE(std::search(prompt.begin(), prompt.end(), cats.begin(), cats.end()),
            prompt.end());
}

TEST_F(SpanQueryTest, ReadsNoFileEvenBesideTheServer) {
  // The model file lies under the working folder; a .span program given on
  // the command line could read beside itself, a network one cannot.
  ASSERT_TRUE(llvm::sys::fs::exists(kModel));
  ApiError error =
      refuse(std::string("query q { gen { user file(\"") + kModel + "\") } }");
  EXPECT_EQ(error.status(), 400);
  EXPECT_NE(error.detail().find("query.span:1:"), std::string::npos)
      << error.detail();
  EXPECT_EQ(refuse("query q { gen { plus { retrieve(corpus = \"test\", "
                   "query = \"x\", k = 2) } user \"q\" } }")
                .status(),
            400);
}

TEST_F(SpanQueryTest, TheServersLimitsAre400s) {
  SpanQueryLimits limits;
  limits.maxTokensLimit = 10;
  ApiError error =
      refuse("query q { gen(max_tokens = 11) { user \"x\" } }", limits);
  EXPECT_EQ(error.status(), 400);
  EXPECT_EQ(error.param(), "max_tokens");
  limits = SpanQueryLimits();
  limits.maxCalls = 2;
  EXPECT_EQ(refuse("query q { gen { plus { repeat(3) { gen { user \"a\" } } } "
                   "user \"b\" } }",
                   limits)
                .status(),
            400);
  EXPECT_EQ(refuse("query q { gen { user nosuch } }").status(), 400);
}

TEST_F(SpanQueryTest, AModelOtherThanTheServedOneIsA404AsForAChat) {
  // It ran on the served model, silently (issue 25, point 9).
  SpanQueryLimits limits;
  limits.maxTokensLimit = 100;
  limits.models = ModelNames({"tiny"});
  ApiError error = refuse(
      "query q { gen(model = \"/etc/passwd\", max_tokens = 2) { user \"x\" "
      "} }",
      limits);
  EXPECT_EQ(error.status(), 404);
  EXPECT_EQ(error.param(), "model");
  EXPECT_NE(error.detail().find("query.span:1:11: the model '/etc/passwd' "
                                "does not exist; this server serves 'tiny'"),
            std::string::npos)
      << error.detail();
  // spnl JSON's model routes spnl's client: taken as it is.
  auto spnl = compileSpanQuery(
      R"({"g": {"model": "spnl/tiny", "input": {"user": "x"},
                "max_tokens": 2}})",
      /*isJson=*/true, {}, *encoder, limits);
  EXPECT_TRUE(bool(spnl)) << llvm::toString(spnl.takeError());
  for (const char *source :
       {"query q { gen(model = \"tiny\", max_tokens = 2) { user \"x\" } }",
        "query q { gen(max_tokens = 2) { user \"x\" } }"}) {
    auto plan = compileSpanQuery(source, false, {}, *encoder, limits);
    EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  }
}

TEST_F(SpanQueryTest, AKnownPromptPastTheKvCacheIsA400NamingBothSizes) {
  SpanQueryLimits limits;
  limits.maxTokensLimit = 100;
  limits.kvCacheTokens = 8;
  ApiError error = refuse(
      "query q { gen(max_tokens = 2) { user \"a question of some length, "
      "longer than eight tokens\" } }",
      limits);
  EXPECT_EQ(error.status(), 400);
  EXPECT_NE(error.detail().find("more than the server's whole KV cache of 8 "
                                "tokens (--kv-cache)"),
            std::string::npos)
      << error.detail();

  // A prompt that fits: max_tokens lowered to what the cache holds after it.
  const char *source = "query q { gen(max_tokens = 90) { user \"x\" } }";
  limits.kvCacheTokens = 0;
  auto plain = compileSpanQuery(source, false, {}, *encoder, limits);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  const int64_t prompt = int64_t(plan::knownPromptTokens(plain->calls[0]));
  EXPECT_EQ(plain->calls[0].options.maxTokens, 90);
  limits.kvCacheTokens = prompt + 20;
  auto lowered = compileSpanQuery(source, false, {}, *encoder, limits);
  ASSERT_TRUE(bool(lowered)) << llvm::toString(lowered.takeError());
  EXPECT_EQ(lowered->calls[0].options.maxTokens, 20);
}

/// The text of every piece of every call's prompt, decoded.
std::string promptText(const plan::Plan &plan, const model::Tokenizer &tokens) {
  std::string text;
  for (const plan::Call &call : plan.calls)
    for (const plan::PlanSegment &segment : call.segments)
      for (const plan::Piece &piece : segment.pieces)
        text += tokens.decode(piece.tokens);
  return text;
}

TEST_F(SpanQueryTest, RetrievesOnlyFromTheCorporaTheServerWasGiven) {
  llvm::SmallString<128> root;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("corpora", root));
  llvm::SmallString<128> docs(root);
  llvm::sys::path::append(docs, "docs");
  ASSERT_FALSE(llvm::sys::fs::create_directory(docs));
  {
    std::error_code code;
    llvm::raw_fd_ostream file((docs + "/pool.md").str(), code);
    ASSERT_FALSE(code);
    file << "When the block pool is full it evicts the least recently used "
            "block.\n";
  }
  retrieval::IndexOptions options;
  options.indexDirectory = (root + "/index").str();
  auto catalog =
      retrieval::CorpusCatalog::open({{"kb", docs.str().str()}}, options);
  ASSERT_TRUE(bool(catalog)) << llvm::toString(catalog.takeError());
  SpanQueryLimits limits;
  limits.corpora = catalog->get();

  // By its name: a .span retrieve and spnl's augment alike.
  auto plan = compileSpanQuery(
      "query q { gen(max_tokens = 4) { plus { retrieve(corpus = \"kb\", "
      "query = \"pool full\", k = 1) } user \"q\" } }",
      false, {}, *encoder, limits);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_NE(promptText(*plan, *tokenizer).find("least recently used"),
            std::string::npos);
  auto augmented = compileSpanQuery(
      R"({"g": {"model": "m", "max_tokens": 4, "input": {"seq": [
          {"augment": {"embedding_model": "e", "body": {"user": "evicts"},
                       "doc": ["kb", {"Text": "not read"}]}},
          {"user": "q"}]}}})",
      true, {}, *encoder, limits);
  ASSERT_TRUE(bool(augmented)) << llvm::toString(augmented.takeError());
  EXPECT_NE(promptText(*augmented, *tokenizer).find("least recently used"),
            std::string::npos);
  EXPECT_EQ(promptText(*augmented, *tokenizer).find("not read"),
            std::string::npos);

  // Any other corpus, its folder's own path included, is refused by name,
  // at the retrieve.
  for (const std::string &corpus : {std::string("other"), docs.str().str()}) {
    ApiError error =
        refuse("query q { gen { plus { retrieve(corpus = \"" + corpus +
                   "\", query = \"x\", k = 2) } user \"q\" } }",
               limits);
    EXPECT_EQ(error.status(), 400);
    EXPECT_NE(error.detail().find("query.span:1:24: error: corpus '" + corpus +
                                  "' is not served here"),
              std::string::npos)
        << error.detail();
    EXPECT_NE(error.detail().find("(--corpus NAME=DIR): kb"), std::string::npos)
        << error.detail();
  }
  llvm::sys::fs::remove_directories(root);
}

TEST_F(SpanQueryTest, SpnlMaxTokensZeroIsAsManyAsTheServerAllows) {
  SpanQueryLimits limits;
  limits.maxTokensLimit = 77;
  for (const char *json :
       {R"({"g": {"model": "m", "input": {"user": "a"}, "max_tokens": 0}})",
        R"({"g": {"model": "m", "input": {"user": "a"}}})"}) {
    auto plan = compileSpanQuery(json, true, {}, *encoder, limits);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->calls.at(0).options.maxTokens, 77) << json;
  }
  // As far as the context leaves room: the judge's prompt counts each
  // candidate at its max_tokens.
  limits.maxTokensLimit = 100000;
  limits.contextLength = 400;
  auto plan = compileSpanQuery(
      R"({"g": {"model": "m", "max_tokens": 0, "input": {"seq": [
          {"system": "Pick one."},
          {"plus": [{"repeat": {"n": 2, "generate": {"model": "m",
              "input": {"user": "write"}, "max_tokens": 50,
              "temperature": 0.5}}}]},
          {"user": "Which?"}]}}})",
      true, {}, *encoder, limits);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const plan::Call &judge = plan->calls.back();
  uint64_t prompt = plan::knownPromptTokens(judge) + 2 * 50;
  EXPECT_EQ(uint64_t(judge.options.maxTokens), 400 - prompt);
  // A .span program's gen without max_tokens keeps gen's own default.
  auto program = compileSpanQuery("query q { gen { user \"a\" } }", false, {},
                                  *encoder, limits);
  ASSERT_TRUE(bool(program)) << llvm::toString(program.takeError());
  EXPECT_EQ(program->calls.at(0).options.maxTokens,
            plan::GenOptions().maxTokens);
}

} // namespace
} // namespace spanc::server
