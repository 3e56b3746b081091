//===- CompilePipelineTest.cpp - Source text → optimized IR → plan --------===//
//
// Runs the whole path (parse, verify, default passes, lowering) on small
// programs with a byte-level stand-in for a chat template, and checks the
// plan's shape, option plumbing and that errors come back as text with
// their source locations; and its first two stages alone (the optimized
// module, a given pipeline, unknown pass names).
//
//===----------------------------------------------------------------------===//

#include "codegen/CompilePipeline.h"
#include "ir/Printer.h"

#include "llvm/Support/SourceMgr.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace spanc;
using ::testing::HasSubstr;

namespace {

/// Every byte is a token; a message is a role token, its bytes and 0.
class ByteEncoder : public codegen::MessageEncoder {
public:
  llvm::Expected<std::vector<plan::TokenId>>
  encodeMessage(codegen::MessageRole role,
                llvm::StringRef content) const override {
    std::vector<plan::TokenId> tokens = {plan::TokenId(1000 + int(role))};
    for (unsigned char byte : content)
      tokens.push_back(byte);
    tokens.push_back(0);
    return tokens;
  }
  std::vector<plan::TokenId>
  encodeFragment(llvm::StringRef text) const override {
    return std::vector<plan::TokenId>(text.bytes_begin(), text.bytes_end());
  }
  std::vector<plan::TokenId> assistantHeader() const override { return {1002}; }
  std::vector<plan::TokenId> endOfTurn() const override { return {0}; }
};

size_t countSegments(const plan::Call &call, plan::SegmentKind kind) {
  size_t count = 0;
  for (const plan::PlanSegment &segment : call.segments)
    count += segment.kind == kind;
  return count;
}

TEST(CompilePipelineTest, RagShapeBecomesOneCallWithTwoSpans) {
  const char *source = R"(
let a = "First document."
let b = "Second document."
query rag {
  gen(max_tokens = 7, temperature = 0) {
    system "Be brief."
    plus { fragment a fragment b }
    user "Which?"
  }
}
)";
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(source, "rag.span", encoder);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->calls.size(), 1u);
  ASSERT_EQ(plan->queries.size(), 1u);
  EXPECT_EQ(plan->queries[0].name, "rag");
  const plan::Call &call = plan->calls[0];
  EXPECT_EQ(call.options.maxTokens, 7);
  EXPECT_EQ(countSegments(call, plan::SegmentKind::Span), 2u);
  EXPECT_EQ(countSegments(call, plan::SegmentKind::Tail), 1u);
  // The system message comes first, as the prefix.
  ASSERT_FALSE(call.segments.empty());
  EXPECT_EQ(call.segments.front().kind, plan::SegmentKind::Prefix);
}

TEST(CompilePipelineTest, ParamOverridesReachTheProgram) {
  const char *source = R"(
param n = 3
query q { gen(max_tokens = n) { user "hi" } }
)";
  ByteEncoder encoder;
  codegen::CompileOptions options;
  options.frontend.paramOverrides = {{"n", "11"}};
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(source, "q.span", encoder, options);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->calls.size(), 1u);
  EXPECT_EQ(plan->calls[0].options.maxTokens, 11);
}

TEST(CompilePipelineTest, SyntaxErrorsComeBackWithTheirLocation) {
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan = codegen::compileToPlan(
      "query q {\n  gen( { user \"x\" }\n", "broken.span", encoder);
  ASSERT_FALSE(bool(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_THAT(message, HasSubstr("broken.span:2:"));
  EXPECT_THAT(message, HasSubstr("error"));
}

TEST(CompilePipelineTest, SemanticErrorsComeBackWithTheirLocation) {
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan = codegen::compileToPlan(
      "query q {\n  gen { user missing }\n}\n", "names.span", encoder);
  ASSERT_FALSE(bool(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_THAT(message, HasSubstr("names.span:2:"));
  EXPECT_THAT(message, HasSubstr("missing"));
}

TEST(CompilePipelineTest, TheNamePicksTheReader) {
  const char *json = R"({"g": {"model": "m", "input": {"cross": [
      {"system": "s"}, {"user": "u"}]}, "max_tokens": 5}})";
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(json, "query.json", encoder);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->calls.size(), 1u);
  EXPECT_EQ(plan->calls[0].options.maxTokens, 5);
  // The same text read as .span is a syntax error.
  llvm::Expected<plan::Plan> asSpan =
      codegen::compileToPlan(json, "query.span", encoder);
  EXPECT_FALSE(bool(asSpan));
  llvm::consumeError(asSpan.takeError());
}

TEST(CompilePipelineTest, CompileToModuleStopsAfterTheOptimizer) {
  // desugar-chat leaves no span.chat behind; the IR is what
  // `spanc compile --emit=ir-opt` prints.
  auto module = codegen::compileToModule("query q { chat { user \"hi\" } }\n",
                                         "chat.span");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  std::string text = ir::toString(**module);
  EXPECT_THAT(text, HasSubstr("span.gen"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("span.chat")));
}

TEST(CompilePipelineTest, AnEmptyPipelineOnlyParses) {
  codegen::CompileOptions options;
  options.pipeline = "";
  auto module = codegen::compileToModule("query q { chat { user \"hi\" } }\n",
                                         "chat.span", options);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  EXPECT_THAT(ir::toString(**module), HasSubstr("span.chat"));
}

TEST(CompilePipelineTest, UnknownPassesAreErrorsBeforeAnyInput) {
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  codegen::CompileOptions pipeline;
  pipeline.pipeline = "plus-simplify,no-such-pass";
  auto optimizer = codegen::Optimizer::create(diagnostics, pipeline);
  ASSERT_FALSE(bool(optimizer));
  EXPECT_THAT(llvm::toString(optimizer.takeError()), HasSubstr("no-such-pass"));
  codegen::CompileOptions skip;
  skip.skipPasses = {"no-such-pass"};
  optimizer = codegen::Optimizer::create(diagnostics, skip);
  ASSERT_FALSE(bool(optimizer));
  EXPECT_THAT(llvm::toString(optimizer.takeError()),
              HasSubstr("--skip-pass: no pass named 'no-such-pass'"));
}

/// A program whose query is `gens` gens nested one in the other (through
/// lets of at most 100 gens each, as braces nest at most 256 deep).
std::string nestedGens(unsigned gens) {
  std::string program = "let l0 = user \"seed\"\n";
  unsigned lets = 0;
  for (unsigned done = 0; done < gens; done += 100) {
    unsigned here = std::min(100u, gens - done);
    std::string let = "let l" + std::to_string(lets + 1) + " = ";
    for (unsigned i = 0; i < here; ++i)
      let += "gen(max_tokens = 1) { ";
    let += "l" + std::to_string(lets);
    for (unsigned i = 0; i < here; ++i)
      let += " }";
    program += let + "\n";
    ++lets;
  }
  return program + "query q { l" + std::to_string(lets) + " }\n";
}

TEST(CompilePipelineTest, CallsNestedPastTheBoundAreAnErrorNotACrash) {
  // 4 000 nested gens: lowering recursed once per call and ran out of
  // stack. Each gen and the cross of its input are a level.
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(nestedGens(4000), "deep.span", encoder);
  ASSERT_FALSE(bool(plan));
  EXPECT_THAT(llvm::toString(plan.takeError()),
              HasSubstr("is nested more than " +
                        std::to_string(ir::kMaxNestingDepth) + " levels deep"));
}

TEST(CompilePipelineTest, CallsNestedToTheBoundLowerToAPlan) {
  // 499 gens: the leaf, a gen and a cross per gen and the yield make
  // exactly kMaxNestingDepth levels; lowering them must fit the stack
  // (under the sanitizers too).
  static_assert(ir::kMaxNestingDepth == 1000, "recount the gens");
  ByteEncoder encoder;
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(nestedGens(499), "deep.span", encoder);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError()).substr(0, 2000);
  EXPECT_EQ(plan->calls.size(), 499u);
  // One gen more is two levels past: the verifier says where.
  llvm::Expected<plan::Plan> past =
      codegen::compileToPlan(nestedGens(500), "deep.span", encoder);
  ASSERT_FALSE(bool(past));
  EXPECT_THAT(llvm::toString(past.takeError()),
              HasSubstr("error: 'span.gen' is nested more than"));
}

llvm::Expected<plan::Plan> lowerWith(const std::string &source,
                                     const codegen::LoweringLimits &limits) {
  ByteEncoder encoder;
  codegen::CompileOptions options;
  options.limits = limits;
  return codegen::compileToPlan(source, "limits.span", encoder, options);
}

TEST(CompilePipelineTest, ARepeatPastTheCallLimitIsAnErrorAtTheRepeat) {
  // examples/judge.span with n = 1e9: lowering made a call per sample until
  // memory ran out. The repeat is refused before its first sample, and the
  // judge does not run without its candidates.
  const char *source = R"(
param n = 3
query judge {
  gen(max_tokens = 8, temperature = 0) {
    system "Pick the best."
    plus { repeat(n) { gen(max_tokens = 4, temperature = 0.8) { user "x" } } }
  }
}
)";
  ByteEncoder encoder;
  codegen::CompileOptions options;
  options.frontend.paramOverrides = {{"n", "1000000000"}};
  llvm::Expected<plan::Plan> plan =
      codegen::compileToPlan(source, "judge.span", encoder, options);
  ASSERT_FALSE(bool(plan));
  EXPECT_THAT(llvm::toString(plan.takeError()),
              HasSubstr("judge.span:6:12: error: the program's repeats expand "
                        "to more than 10000 samples (this one to 1000000000); "
                        "spanc allows at most 10000 (--max-calls N raises the "
                        "limit)"));
}

TEST(CompilePipelineTest, TheCallLimitCountsCallsAndCanBeRaised) {
  // 150 distinct gens under a plus, then a judge: 151 calls.
  std::string source = "query q { gen { plus {";
  for (int i = 0; i < 150; ++i)
    source += " gen { user \"c" + std::to_string(i) + "\" }";
  source += " } user \"best?\" } }\n";
  codegen::LoweringLimits limits;
  limits.maxCalls = 150;
  llvm::Expected<plan::Plan> over = lowerWith(source, limits);
  ASSERT_FALSE(bool(over));
  EXPECT_THAT(llvm::toString(over.takeError()),
              HasSubstr("error: the program makes more than 150 model calls; "
                        "spanc allows at most 150"));
  limits.maxCalls = 151;
  llvm::Expected<plan::Plan> fits = lowerWith(source, limits);
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  EXPECT_EQ(fits->calls.size(), 151u);
}

TEST(CompilePipelineTest, RepeatSamplesCountAcrossRepeats) {
  // Two repeats of 60 greedy samples: two calls, 120 samples.
  const char *source = R"(
query q {
  gen { plus { repeat(60) { gen(temperature = 0) { user "a" } } } }
  gen { plus { repeat(60) { gen(temperature = 0) { user "b" } } } }
}
)";
  codegen::LoweringLimits limits;
  limits.maxCalls = 119;
  llvm::Expected<plan::Plan> over = lowerWith(source, limits);
  ASSERT_FALSE(bool(over));
  EXPECT_THAT(llvm::toString(over.takeError()),
              HasSubstr("limits.span:4:16: error: the program's repeats "
                        "expand to more than 119 samples (this one to 60)"));
  limits.maxCalls = 120;
  llvm::Expected<plan::Plan> fits = lowerWith(source, limits);
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  EXPECT_EQ(fits->calls.size(), 4u);
}

TEST(CompilePipelineTest, APromptPastTheContextIsAnErrorAtItsGen) {
  // Byte tokens: the user message is 1 + 5 + 1 tokens, the assistant
  // header 1: 8, and max_tokens 10 makes 18.
  const char *source =
      "query q {\n  gen(max_tokens = 10) { user \"hello\" }\n}\n";
  codegen::LoweringLimits limits;
  limits.contextLength = 18;
  llvm::Expected<plan::Plan> fits = lowerWith(source, limits);
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  limits.contextLength = 17;
  llvm::Expected<plan::Plan> over = lowerWith(source, limits);
  ASSERT_FALSE(bool(over));
  EXPECT_THAT(llvm::toString(over.takeError()),
              HasSubstr("limits.span:2:3: error: this call's prompt has 8 "
                        "tokens; with max_tokens 10 it exceeds the model's "
                        "context of 17 tokens (lower max_tokens to 9 or "
                        "less, or shorten the prompt)"));
}

TEST(CompilePipelineTest, APromptThatSplicesOutputsIsCheckedForWhatIsKnown) {
  // The outer call's prompt holds the inner output (at most 4 tokens,
  // unknown yet): its frame (header and end of turn, 2), the user message
  // (3) and the assistant header (1) count: 6 at least.
  const char *source =
      "query q { gen(max_tokens = 20) { gen(max_tokens = 4) { user \"a\" } "
      "user \"b\" } }\n";
  codegen::LoweringLimits limits;
  limits.contextLength = 25;
  llvm::Expected<plan::Plan> over = lowerWith(source, limits);
  ASSERT_FALSE(bool(over));
  EXPECT_THAT(llvm::toString(over.takeError()),
              HasSubstr("this call's prompt has at least 6 tokens; with "
                        "max_tokens 20 it exceeds the model's context of 25"));
  limits.contextLength = 26;
  llvm::Expected<plan::Plan> fits = lowerWith(source, limits);
  EXPECT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
}

} // namespace
