//===- EngineTest.cpp - The engine thread without the network -------------===//
//
// Requests submitted from many threads at once join one session and answer
// as their calls do alone (greedy, on the tiny random-weight llama the
// build generates, f32 GEMMs); a session that reaches its call limit drains
// and starts over without losing a request; a full engine refuses with
// 429, and so does one whose model calls would pass its bound (400 for a
// request larger than the bound); shutdown cancels what is in flight; the
// metrics count every request.
//
//===----------------------------------------------------------------------===//

#include "server/Engine.h"

#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "server/ApiError.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

namespace spanc::server {
namespace {

const char *kModelPath = "test/data/synthetic/tiny-llama-synthetic.gguf";

std::vector<plan::TokenId> range(plan::TokenId first, int count) {
  std::vector<plan::TokenId> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

/// A request with one call: a shared system prefix, then its question.
RequestCalls request(int question, int64_t maxTokens = 10) {
  RequestCalls calls;
  plan::Call &call = calls.calls.emplace_back();
  call.options.maxTokens = maxTokens;
  plan::PlanSegment &segment = call.segments.emplace_back();
  segment.pieces.emplace_back().tokens = range(20, 40);
  segment.pieces.emplace_back().tokens = range(100 + 5 * question, 7);
  calls.promptTokens.push_back(47);
  return calls;
}

/// What a client reads: the text, then the result.
struct Answer {
  std::string text;
  ChoiceResult result;
};

Answer wait(ResponseStream &stream) {
  Answer answer;
  ResponseStream::Update update;
  do {
    stream.take(update, std::chrono::milliseconds(50));
    answer.text += update.text[0];
  } while (!update.allDone);
  answer.result = stream.result(0);
  return answer;
}

class EngineTest : public ::testing::Test {
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

  std::unique_ptr<sched::Executor> makeExecutor(
      int64_t cacheTokens = 4096, const kv::SpanOptions &spanOptions = {},
      kv::RelocationMode relocation = kv::RelocationMode::RopeInKernel) {
    sched::ExecutorOptions options;
    options.cacheTokens = cacheTokens;
    options.spanOptions = spanOptions;
    options.relocationMode = relocation;
    auto executor = sched::Executor::create(*model, *tokenizer, options);
    EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
    return executor ? std::move(*executor) : nullptr;
  }

  /// The question's answer from a plan of its call alone, fresh cache.
  std::string alone(int question) {
    plan::Plan plan;
    plan.calls.push_back(request(question).calls[0]);
    std::vector<sched::CallOutcome> outcomes = makeExecutor()->run(plan);
    EXPECT_TRUE(outcomes[0].succeeded) << outcomes[0].error;
    return outcomes[0].text;
  }

  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

TEST_F(EngineTest, ConcurrentRequestsAnswerAsAloneAcrossSessionRestarts) {
  constexpr int kRequests = 10;
  std::vector<std::string> expected;
  for (int question = 0; question < kRequests; ++question)
    expected.push_back(alone(question));

  std::unique_ptr<sched::Executor> executor = makeExecutor();
  ServerMetrics metrics("tiny", 16, executor->pool().numBlocks());
  // Three calls a session: the ten requests need several sessions.
  Engine engine(*executor, metrics, 100, {}, 3);
  engine.start();
  std::vector<Answer> answers(kRequests);
  std::vector<std::thread> clients;
  for (int question = 0; question < kRequests; ++question)
    clients.emplace_back([&, question] {
      auto stream = engine.submit(request(question), Clock::now());
      ASSERT_TRUE(bool(stream)) << llvm::toString(stream.takeError());
      answers[question] = wait(**stream);
    });
  for (std::thread &client : clients)
    client.join();
  for (int question = 0; question < kRequests; ++question) {
    EXPECT_TRUE(answers[question].result.succeeded)
        << answers[question].result.error;
    EXPECT_EQ(answers[question].text, expected[question]) << question;
  }
  EXPECT_EQ(engine.numInFlight(), 0u);
  engine.shutdown("test over");
  std::string text = metrics.render();
  EXPECT_NE(text.find("vllm:e2e_request_latency_seconds_count{model_name="
                      "\"tiny\"} 10.0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm:prompt_tokens_total{model_name=\"tiny\"} 470.0"),
            std::string::npos);
}

TEST_F(EngineTest, AFullEngineRefusesAndShutdownCancelsInFlight) {
  std::unique_ptr<sched::Executor> executor = makeExecutor();
  ServerMetrics metrics("tiny", 16, executor->pool().numBlocks());
  Engine engine(*executor, metrics, 1);
  engine.start();
  auto held = engine.submit(request(0, 2000), Clock::now());
  ASSERT_TRUE(bool(held)) << llvm::toString(held.takeError());
  auto refused = engine.submit(request(1), Clock::now());
  ASSERT_FALSE(bool(refused));
  ApiError error = toApiError(refused.takeError());
  EXPECT_EQ(error.status(), 429);
  engine.shutdown("shutting down");
  Answer answer = wait(**held);
  EXPECT_FALSE(answer.result.succeeded);
  EXPECT_EQ(answer.result.error, "shutting down");
  EXPECT_EQ(answer.result.reason, FinishReason::Abort);
  EXPECT_LT(answer.result.stats.generatedTokens, 2000u);
  auto late = engine.submit(request(2), Clock::now());
  ASSERT_FALSE(bool(late));
  EXPECT_EQ(toApiError(late.takeError()).status(), 503);
  // Every block is back in the pool.
  EXPECT_EQ(executor->pool().numFreeBlocks(), executor->pool().numBlocks());
}

/// `count` calls of one request (choices of one prompt).
RequestCalls manyCalls(size_t count, int64_t maxTokens) {
  RequestCalls calls;
  for (size_t choice = 0; choice < count; ++choice) {
    calls.calls.push_back(request(0, maxTokens).calls[0]);
    calls.promptTokens.push_back(47);
  }
  return calls;
}

TEST_F(EngineTest, TheCallBoundRefusesPastItAndFreesAsRequestsFinish) {
  std::unique_ptr<sched::Executor> executor = makeExecutor();
  ServerMetrics metrics("tiny", 16, executor->pool().numBlocks());
  // At most 10 model calls held, whatever the request count.
  Engine engine(*executor, metrics, 100, {}, 65536, 10);
  engine.start();
  auto held = engine.submit(manyCalls(8, 2000), Clock::now());
  ASSERT_TRUE(bool(held)) << llvm::toString(held.takeError());
  EXPECT_EQ(engine.numCallsInFlight(), 8u);
  // 8 + 3 > 10: 429, naming the option.
  auto refused = engine.submit(manyCalls(3, 4), Clock::now());
  ASSERT_FALSE(bool(refused));
  ApiError error = toApiError(refused.takeError());
  EXPECT_EQ(error.status(), 429);
  EXPECT_NE(error.detail().find("--max-queued-calls"), std::string::npos)
      << error.detail();
  // More calls than the bound could ever hold: 400.
  auto tooLarge = engine.submit(manyCalls(11, 4), Clock::now());
  ASSERT_FALSE(bool(tooLarge));
  EXPECT_EQ(toApiError(tooLarge.takeError()).status(), 400);
  // 8 + 2 fits, and its calls are admitted beside the held ones.
  auto fits = engine.submit(manyCalls(2, 4), Clock::now());
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  Answer answer = wait(**fits);
  EXPECT_TRUE(answer.result.succeeded) << answer.result.error;
  // Its calls no longer count once it finished.
  EXPECT_EQ(engine.numCallsInFlight(), 8u);
  engine.shutdown("test over");
  EXPECT_EQ(engine.numCallsInFlight(), 0u);
}

/// A call over a system prefix, two documents as spans in the given
/// order, and a question.
RequestCalls spanRequest(bool swapped) {
  RequestCalls calls;
  plan::Call &call = calls.calls.emplace_back();
  call.options.maxTokens = 4;
  auto segment = [&](plan::SegmentKind kind, std::vector<plan::TokenId> ids) {
    plan::PlanSegment &added = call.segments.emplace_back();
    added.kind = kind;
    added.pieces.emplace_back().tokens = std::move(ids);
  };
  segment(plan::SegmentKind::Prefix, range(20, 16));
  segment(plan::SegmentKind::Span, range(swapped ? 300 : 200, 32));
  segment(plan::SegmentKind::Span, range(swapped ? 200 : 300, 32));
  segment(plan::SegmentKind::Tail, range(400, 5));
  calls.promptTokens.push_back(16 + 32 + 32 + 5);
  return calls;
}

std::string sampleLine(const std::string &text, const std::string &name) {
  size_t at = text.find("\n" + name + "{");
  return at == std::string::npos
             ? ""
             : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST_F(EngineTest, SpanReuseAndEvictionsReachTheMetrics) {
  // 12 blocks: the second document order reuses both spans whole (no
  // boundary recompute), and the distinct questions after it evict.
  kv::SpanOptions wholeSpans;
  wholeSpans.recomputeEndBlocks = 0;
  std::unique_ptr<sched::Executor> executor = makeExecutor(12 * 16, wholeSpans);
  ServerMetrics metrics("tiny", 16, executor->pool().numBlocks());
  Engine engine(*executor, metrics, 100);
  engine.start();
  uint64_t spanReused = 0, reused = 0;
  for (bool swapped : {false, true}) {
    auto stream = engine.submit(spanRequest(swapped), Clock::now());
    ASSERT_TRUE(bool(stream)) << llvm::toString(stream.takeError());
    Answer answer = wait(**stream);
    ASSERT_TRUE(answer.result.succeeded) << answer.result.error;
    spanReused += answer.result.stats.spanReusedTokens;
    reused += answer.result.stats.reusedTokens;
  }
  // The second call found both documents (the prefix counts apart).
  EXPECT_EQ(spanReused, 64u);
  EXPECT_EQ(reused, 16u + 64u);
  for (int question = 0; question < 6; ++question) {
    auto stream = engine.submit(request(question), Clock::now());
    ASSERT_TRUE(bool(stream)) << llvm::toString(stream.takeError());
    EXPECT_TRUE(wait(**stream).result.succeeded);
  }
  engine.shutdown("test over");
  const uint64_t evictions = executor->pool().numEvictions();
  EXPECT_GT(evictions, 0u);
  std::string text = metrics.render();
  EXPECT_EQ(sampleLine(text, "spanc:span_tokens_reused_total"),
            "spanc:span_tokens_reused_total{model_name=\"tiny\"} 64.0")
      << text;
  EXPECT_EQ(sampleLine(text, "spanc:blocks_evicted_total"),
            "spanc:blocks_evicted_total{model_name=\"tiny\"} " +
                std::to_string(evictions) + ".0");
  // rope-in-kernel reads reused spans where they lie: nothing moves.
  EXPECT_EQ(sampleLine(text, "spanc:span_tokens_relocated_total"),
            "spanc:span_tokens_relocated_total{model_name=\"tiny\"} 0.0");
}

TEST_F(EngineTest, RelocatedSpanTokensReachTheMetricsUnderRerope) {
  // With ReRoPE both documents sit where the first order put them, and the
  // second order wants each at the other's place: every span token moves.
  kv::SpanOptions wholeSpans;
  wholeSpans.recomputeEndBlocks = 0;
  std::unique_ptr<sched::Executor> executor =
      makeExecutor(4096, wholeSpans, kv::RelocationMode::Rerope);
  ServerMetrics metrics("tiny", 16, executor->pool().numBlocks());
  Engine engine(*executor, metrics, 100);
  engine.start();
  uint64_t relocated = 0;
  for (bool swapped : {false, true}) {
    auto stream = engine.submit(spanRequest(swapped), Clock::now());
    ASSERT_TRUE(bool(stream)) << llvm::toString(stream.takeError());
    Answer answer = wait(**stream);
    ASSERT_TRUE(answer.result.succeeded) << answer.result.error;
    relocated += answer.result.stats.relocatedTokens;
  }
  engine.shutdown("test over");
  EXPECT_EQ(relocated, 64u);
  EXPECT_EQ(sampleLine(metrics.render(), "spanc:span_tokens_relocated_total"),
            "spanc:span_tokens_relocated_total{model_name=\"tiny\"} 64.0");
}

} // namespace
} // namespace spanc::server
