//===- ModelRunnerTest.cpp - The runner and the scheduler on a fake backend
//===//
//
// A recording backend stands in for the model: it logs what the runner
// asks of it and answers every logits row with one chosen token. So the
// runner's part (relocations before the forward pass, the batch as the
// scheduler laid it out, sampling, max_tokens, streaming) and the whole
// schedule → run → update loop are tested without a model
// (docs/ARCHITECTURE.md, "Running a plan").
//
//===----------------------------------------------------------------------===//

#include "runtime/sched/ModelRunner.h"
#include "runtime/backend/Backend.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Scheduler.h"

#include "gtest/gtest.h"

#include <numeric>
#include <string>

namespace spanc::sched {
namespace {

/// Logs every request and answers each logits row with `answer`.
class RecordingBackend final : public backend::Backend {
public:
  RecordingBackend(int64_t vocabSize, int32_t answer)
      : vocabSize(vocabSize), answer(answer) {}

  void tokenDistances(uint32_t, llvm::ArrayRef<int32_t>,
                      llvm::ArrayRef<int32_t>,
                      llvm::ArrayRef<int32_t> validTokens,
                      std::vector<float> &distances) override {
    log.push_back("distances");
    for (int32_t valid : validTokens)
      for (int32_t slot = 0; slot < valid; ++slot)
        distances.push_back(float(distances.size() % 7));
  }
  void relocate(const kv::RelocationPlan &plan) override {
    if (!plan.empty())
      log.push_back("relocate");
  }
  void copyBlock(const kv::RelocationOp &) override { log.push_back("copy"); }

  std::vector<std::string> log;
  int64_t tokens = 0;
  /// A forward pass with a prompt token from here on logs "forward marked".
  int32_t markedTokens = 1 << 30;

private:
  backend::StepLimits stepLimits() const override {
    // Permissive bounds: the checks every backend makes still run
    // (model::checkForwardSequence, e.g. decode sequences first).
    backend::StepLimits limits;
    limits.numBlocks = 1 << 30;
    limits.blockSize = 1 << 20;
    limits.vocabSize = 1u << 30; // marked tokens lie past the vocabulary
    limits.numPositions = int64_t(1) << 40;
    limits.ropeInKernel = false;
    return limits;
  }
  uint32_t numLayers() const override { return 1000; }
  llvm::Error runStep(const backend::StepLayout &step,
                      model::ForwardOutput *output,
                      uint32_t numLayers) override {
    llvm::ArrayRef<model::ForwardSequence> batch = step.sequences;
    for (const model::ForwardSequence &sequence : batch)
      tokens += int64_t(sequence.tokens.size());
    if (!output) {
      log.push_back("forward " + std::to_string(numLayers) + " layers");
      return llvm::Error::success();
    }
    bool readsMarked = false;
    for (const model::ForwardSequence &sequence : batch)
      for (int32_t token : sequence.tokens)
        readsMarked |= token >= markedTokens;
    log.push_back(readsMarked ? "forward marked" : "forward");
    output->vocabSize = vocabSize;
    output->rowOffsets.assign(1, 0);
    for (const model::ForwardSequence &sequence : batch) {
      int64_t rows = sequence.logits == model::LogitsRequest::Last ? 1 : 0;
      output->rowOffsets.push_back(output->rowOffsets.back() + rows);
    }
    output->logits.assign(size_t(output->rowOffsets.back() * vocabSize), 0.0f);
    for (int64_t row = 0; row < output->rowOffsets.back(); ++row)
      output->logits[size_t(row * vocabSize + answer)] = 1.0f;
    return llvm::Error::success();
  }

  int64_t vocabSize;
  int32_t answer;
};

/// The synthetic model's tokenizer (the file stays open: the tokenizer may
/// point into it).
struct TinyTokenizer {
  std::unique_ptr<model::GgufFile> file;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

TinyTokenizer tinyTokenizer() {
  TinyTokenizer result;
  auto file =
      model::GgufFile::open("test/data/synthetic/tiny-llama-synthetic.gguf");
  EXPECT_TRUE(bool(file)) << llvm::toString(file.takeError());
  if (!file)
    return result;
  result.file = std::move(*file);
  auto tokenizer = model::Tokenizer::fromGguf(*result.file);
  EXPECT_TRUE(bool(tokenizer)) << llvm::toString(tokenizer.takeError());
  if (tokenizer)
    result.tokenizer = std::move(*tokenizer);
  return result;
}

/// The first token that does not end generation and renders as text.
int32_t ordinaryToken(const model::Tokenizer &tokenizer) {
  for (int32_t id = 0; id < tokenizer.vocabSize(); ++id)
    if (!tokenizer.isEndOfGeneration(id) &&
        !tokenizer.tokenToPiece(id, false).empty())
      return id;
  return 0;
}

plan::Call &addCall(plan::Plan &plan, int firstToken, int count,
                    int64_t maxTokens) {
  plan::Call &call = plan.calls.emplace_back();
  call.id = plan::CallId(plan.calls.size() - 1);
  call.options.maxTokens = maxTokens;
  plan::PlanSegment &segment = call.segments.emplace_back();
  std::vector<plan::TokenId> &tokens = segment.pieces.emplace_back().tokens;
  tokens.resize(size_t(count));
  std::iota(tokens.begin(), tokens.end(), firstToken);
  return call;
}

/// The executor's loop: admit, schedule, run, update, copy.
void runToCompletion(Scheduler &scheduler, ModelRunner &runner,
                     const SchedulerOptions &options, const plan::Plan &plan,
                     std::vector<CallOutcome> &outcomes,
                     const TokenCallback &onToken) {
  scheduler.beginRun(plan, outcomes);
  runner.beginRun(plan, outcomes, onToken);
  SchedulerOutput step;
  RunnerOutput result;
  int steps = 0;
  while (scheduler.numDone() < plan.calls.size() && steps < 100) {
    ++steps;
    ASSERT_FALSE(bool(scheduler.schedule(step)));
    if (!scheduler.hasRunning() && step.empty()) {
      ASSERT_TRUE(step.admittedCalls > 0 || scheduler.hasWaiting());
      continue;
    }
    EXPECT_LE(int64_t(step.tokens.size()), options.stepTokenBudget);
    if (llvm::Error error = runner.execute(step, result))
      FAIL() << llvm::toString(std::move(error));
    scheduler.update(step, result);
  }
  scheduler.endRun();
  runner.endRun();
}

TEST(ModelRunnerTest, ALoopOnAFakeBackendRunsEveryCallToMaxTokens) {
  TinyTokenizer tiny = tinyTokenizer();
  ASSERT_TRUE(tiny.tokenizer);
  const model::Tokenizer *tokenizer = tiny.tokenizer.get();
  const int32_t answer = ordinaryToken(*tokenizer);
  RecordingBackend backend(tokenizer->vocabSize(), answer);

  kv::BlockPool pool(64, 16);
  kv::KvCacheManager cache(pool, kv::BlockHasher("runner-test"),
                           kv::CacheMode::Span,
                           kv::RelocationMode::RopeInKernel);
  SchedulerOptions options;
  options.stepTokenBudget = 32;
  Scheduler scheduler(cache, pool, options);
  ModelRunner runner(backend, *tokenizer, /*keepFirstLogits=*/true);

  plan::Plan plan;
  addCall(plan, 10, 20, 3);
  addCall(plan, 40, 50, 5).cacheOnly = true;
  std::vector<CallOutcome> outcomes;
  std::vector<plan::CallId> streamed;
  TokenCallback onToken = [&](plan::CallId call, llvm::StringRef) {
    streamed.push_back(call);
  };
  runToCompletion(scheduler, runner, options, plan, outcomes, onToken);

  ASSERT_EQ(outcomes.size(), 2u);
  for (size_t call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    EXPECT_TRUE(outcomes[call].succeeded) << outcomes[call].error;
    EXPECT_EQ(int64_t(outcomes[call].tokens.size()),
              plan.calls[call].options.maxTokens);
    for (int32_t token : outcomes[call].tokens)
      EXPECT_EQ(token, answer);
    EXPECT_EQ(outcomes[call].stats.generatedTokens,
              outcomes[call].tokens.size());
    EXPECT_EQ(outcomes[call].firstLogits.size(),
              size_t(tokenizer->vocabSize()));
    EXPECT_EQ(outcomes[call].stats.promptTokens, call == 0 ? 20u : 50u);
  }
  EXPECT_EQ(runner.tokensGenerated(), 8u);
  // Only the call that is not cache-only streams.
  EXPECT_EQ(streamed, std::vector<plan::CallId>(3, 0));
  // Prompts (70 tokens) and every generated token but each call's last
  // were fed through the backend.
  EXPECT_EQ(backend.tokens, 70 + 2 + 4);
  EXPECT_EQ(backend.log.front(), "forward");
}

TEST(ModelRunnerTest, MaxTokensZeroGeneratesNothing) {
  // As `spanc generate -n 0`: the prompt is computed, no token is kept.
  TinyTokenizer tiny = tinyTokenizer();
  ASSERT_TRUE(tiny.tokenizer);
  const model::Tokenizer *tokenizer = tiny.tokenizer.get();
  RecordingBackend backend(tokenizer->vocabSize(), ordinaryToken(*tokenizer));
  kv::BlockPool pool(64, 16);
  kv::KvCacheManager cache(pool, kv::BlockHasher("runner-test"),
                           kv::CacheMode::Span,
                           kv::RelocationMode::RopeInKernel);
  SchedulerOptions options;
  Scheduler scheduler(cache, pool, options);
  ModelRunner runner(backend, *tokenizer, /*keepFirstLogits=*/false);

  plan::Plan plan;
  addCall(plan, 10, 20, 0);
  std::vector<CallOutcome> outcomes;
  std::vector<plan::CallId> streamed;
  TokenCallback onToken = [&](plan::CallId call, llvm::StringRef) {
    streamed.push_back(call);
  };
  runToCompletion(scheduler, runner, options, plan, outcomes, onToken);

  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
  EXPECT_TRUE(outcomes[0].tokens.empty());
  EXPECT_EQ(outcomes[0].text, "");
  EXPECT_EQ(outcomes[0].stats.generatedTokens, 0u);
  EXPECT_EQ(outcomes[0].stats.promptTokens, 20u);
  EXPECT_TRUE(streamed.empty());
  EXPECT_EQ(runner.tokensGenerated(), 0u);
}

TEST(ModelRunnerTest, ACallPastTheContextFailsAtAdmissionBeforeAnyCompute) {
  // A 40 000-word prompt was prefilled for 30 s before the RoPE table said
  // no. The first call fits the context of 36 exactly (20 + 16); the
  // second's prompt and max_tokens (20 + 17) do not: it fails when it is
  // admitted, and nothing of it is computed.
  TinyTokenizer tiny = tinyTokenizer();
  ASSERT_TRUE(tiny.tokenizer);
  const model::Tokenizer *tokenizer = tiny.tokenizer.get();
  RecordingBackend backend(tokenizer->vocabSize(), ordinaryToken(*tokenizer));
  kv::BlockPool pool(64, 16);
  kv::KvCacheManager cache(pool, kv::BlockHasher("runner-test"),
                           kv::CacheMode::Span,
                           kv::RelocationMode::RopeInKernel);
  SchedulerOptions options;
  options.contextLength = 36;
  Scheduler scheduler(cache, pool, options);
  ModelRunner runner(backend, *tokenizer, /*keepFirstLogits=*/false);

  plan::Plan plan;
  addCall(plan, 10, 20, 16);
  addCall(plan, 40, 20, 17);
  std::vector<CallOutcome> outcomes;
  runToCompletion(scheduler, runner, options, plan, outcomes, nullptr);

  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
  EXPECT_EQ(outcomes[0].tokens.size(), 16u);
  EXPECT_FALSE(outcomes[1].succeeded);
  EXPECT_EQ(outcomes[1].error, "its prompt of 20 tokens and max_tokens 17 "
                               "exceed the model's context of 36 tokens");
  EXPECT_EQ(outcomes[1].stats.computedTokens, 0u);
  // Only the first call's prompt and its tokens but the last were fed.
  EXPECT_EQ(backend.tokens, 20 + 15);
}

TEST(ModelRunnerTest, ABlendRunsInAStepAfterItsSpansBeforeTheTail) {
  TinyTokenizer tiny = tinyTokenizer();
  ASSERT_TRUE(tiny.tokenizer);
  const model::Tokenizer *tokenizer = tiny.tokenizer.get();
  RecordingBackend backend(tokenizer->vocabSize(), ordinaryToken(*tokenizer));
  kv::BlockPool pool(64, 16);
  kv::KvCacheManager cache(pool, kv::BlockHasher("runner-test"),
                           kv::CacheMode::Span,
                           kv::RelocationMode::RopeInKernel,
                           kv::SpanOptions{kv::SpanContext::Prefix, 0, 1, 25});
  SchedulerOptions options;
  options.stepTokenBudget = 512;
  Scheduler scheduler(cache, pool, options);
  ModelRunner runner(backend, *tokenizer, /*keepFirstLogits=*/false);

  // prefix (16), two spans of 20 tokens (two blocks each), a tail of 4.
  plan::Plan plan;
  plan::Call &call = plan.calls.emplace_back();
  call.options.maxTokens = 1;
  int next = 10;
  for (auto [kind, count] : {std::pair{kv::SegmentKind::Prefix, 16},
                             std::pair{kv::SegmentKind::Span, 20},
                             std::pair{kv::SegmentKind::Span, 20},
                             std::pair{kv::SegmentKind::Tail, 4}}) {
    plan::PlanSegment &segment = call.segments.emplace_back();
    segment.kind = kind;
    std::vector<plan::TokenId> &tokens = segment.pieces.emplace_back().tokens;
    tokens.resize(size_t(count));
    std::iota(tokens.begin(), tokens.end(), next);
    next += count;
  }
  std::vector<CallOutcome> outcomes;
  runToCompletion(scheduler, runner, options, plan, outcomes, nullptr);
  ASSERT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
  // The spans' step, then the blend before the tail's forward pass: a copy
  // per span block, the selection layers, the distances, the chosen rows.
  EXPECT_EQ(backend.log,
            (std::vector<std::string>{"forward", "copy", "copy", "copy", "copy",
                                      "forward 2 layers", "distances",
                                      "forward", "forward"}));
  // The second span's end block (4 tokens) whole, and 25 % of 40 tokens
  // among the others.
  EXPECT_EQ(outcomes[0].stats.blendedTokens, 4u + 10u);
}

TEST(ModelRunnerTest, WithReropeTheTailRunsAfterItsSpansWereMoved) {
  TinyTokenizer tiny = tinyTokenizer();
  ASSERT_TRUE(tiny.tokenizer);
  RecordingBackend backend(tiny.tokenizer->vocabSize(),
                           ordinaryToken(*tiny.tokenizer));
  backend.markedTokens = 900; // the tail's tokens

  kv::BlockPool pool(64, 16);
  kv::KvCacheManager cache(pool, kv::BlockHasher("runner-test"),
                           kv::CacheMode::Span, kv::RelocationMode::Rerope);
  SchedulerOptions options;
  Scheduler scheduler(cache, pool, options);
  ModelRunner runner(backend, *tiny.tokenizer, /*keepFirstLogits=*/false);

  plan::Plan plan;
  plan::Call &call = addCall(plan, 100, 16, 2);
  for (int first : {200, 300}) {
    plan::PlanSegment &span = call.segments.emplace_back();
    span.kind = kv::SegmentKind::Span;
    std::vector<plan::TokenId> &tokens = span.pieces.emplace_back().tokens;
    tokens.resize(16);
    std::iota(tokens.begin(), tokens.end(), first);
  }
  plan::PlanSegment &tail = call.segments.emplace_back();
  tail.kind = kv::SegmentKind::Tail;
  tail.pieces.emplace_back().tokens = {900, 901, 902};
  std::vector<CallOutcome> outcomes;
  runToCompletion(scheduler, runner, options, plan, outcomes, nullptr);

  ASSERT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
  // The prefix and the spans, then the spans' move, then the tail.
  ASSERT_GE(backend.log.size(), 3u);
  EXPECT_EQ(backend.log[0], "forward");
  EXPECT_EQ(backend.log[1], "relocate");
  EXPECT_EQ(backend.log[2], "forward marked");
}

} // namespace
} // namespace spanc::sched
