//===- ExecutorTest.cpp - End-to-end span queries through the executor ----===//
//
// The runtime's correctness properties (issue #5, item 6), checked through
// sched::Executor with greedy decoding on SmolLM2 (skipped when absent) and
// on two tiny random-weight models the build generates
// (//test/data/synthetic: llama with normal RoPE pairs, qwen2 with NeoX
// pairs and Q/K/V biases; GQA 4/2 heads of dim 64), each with f32 and with
// f16 (the default) K/V storage: (a) a span-cache hit gives the miss's
// first-token logits and greedy answer under both relocations; (b) K that
// ReRoPE relocated equals K the miss computed at those positions; (c) AB
// then BA reuses every span block; (d) one cached span at two offsets in one
// step gives each call its solo answer; (e) a cache 4x too small changes no
// answer; (f) stock prefix caching agrees with no caching; and a warm cache
// or a bulk answers like a cold run or its queries one by one. Models run
// with f32 GEMMs (`spanc run --batch-invariant`), whose results do not
// depend on how many rows share a step.
//
//===----------------------------------------------------------------------===//

#include "runtime/sched/Executor.h"
#include "test/isa/IsaPath.h"
#include "test/unit/sched/ExecutorTestUtils.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace spanc {
namespace {

const std::string kDocuments = std::string(sched::kPoolAndRopeDocuments) + R"(
let bulk = """A bulk is a set of queries in one file. The runtime may order
them so that queries that share fragments run close together in time, which
raises the cache hit rate. Continuous batching lets all ready calls share
one forward pass per step."""
)";

/// A model the tests run on.
struct ModelCase {
  const char *name;
  /// Path relative to SPANC_ROOT (installed models) or to the test's
  /// working directory, the runfiles root (generated ones).
  const char *path;
  bool installed;
  /// Store K/V as f16 (the default) or exactly in f32.
  bool halfPrecisionKv;
};

using sched::Answers;
using sched::answers;
using sched::LoadedModel;
using sched::reusedTokens;

class ExecutorTest : public ::testing::TestWithParam<ModelCase> {
protected:
  /// Loads each model once for the whole suite (SmolLM2 packs 135M
  /// weights); nullptr when an installed model is absent.
  static LoadedModel *load(const ModelCase &modelCase) {
    static std::map<std::string, std::unique_ptr<LoadedModel>> loaded;
    auto found = loaded.find(modelCase.name);
    if (found != loaded.end())
      return found->second.get();
    std::unique_ptr<LoadedModel> &slot = loaded[modelCase.name];
    std::string path =
        sched::testModelPath(modelCase.path, modelCase.installed);
    if (!llvm::sys::fs::exists(path)) {
      EXPECT_TRUE(modelCase.installed) << "generated model missing at " << path;
      return nullptr;
    }
    // f32 GEMMs: oneDNN's bf16 kernels round differently with the number
    // of rows in a step, which would make a call's answer depend on what
    // shares its step; the properties below are exact only without that.
    model::ModelOptions modelOptions;
    modelOptions.forceF32 = true;
    modelOptions.halfPrecisionKv = modelCase.halfPrecisionKv;
    auto result = sched::loadChatModel(path, modelOptions);
    EXPECT_TRUE(bool(result)) << llvm::toString(result.takeError());
    if (!result)
      return nullptr;
    slot = std::move(*result);
    return slot.get();
  }

  void SetUp() override {
    LoadedModel *loaded = load(GetParam());
    if (!loaded)
      GTEST_SKIP() << GetParam().path
                   << " is not installed: run tools/setup.sh";
    loadedModel = loaded;
    model = loaded->model.get();
  }

  /// (a): hit = miss first-token logits and greedy answers, both
  /// relocations.
  void checkHitLogitsEqualMiss();

  /// Whether K/V are exact (f32 storage): the issue's 1e-3 logits bound and
  /// 1e-4 relocated-K bound hold there; f16 storage rounds every K, and
  /// ReRoPE turns the rounded K and rounds again.
  bool exactKv() const { return !GetParam().halfPrecisionKv; }

  /// Compiles `queries` (after the shared documents) through the default
  /// pipeline and lowers it.
  plan::Plan compile(const std::string &queries) {
    return sched::compilePlan(kDocuments + queries, *loadedModel);
  }

  std::unique_ptr<sched::Executor>
  makeExecutor(kv::CacheMode cacheMode = kv::CacheMode::Span,
               kv::RelocationMode relocation = kv::RelocationMode::RopeInKernel,
               int64_t cacheTokens = 16384, bool keepFirstLogits = false) {
    sched::ExecutorOptions options;
    options.spanOptions = spanOptions;
    options.keepFirstLogits = keepFirstLogits;
    options.cacheMode = cacheMode;
    options.relocationMode = relocation;
    options.cacheTokens = cacheTokens;
    return sched::createExecutor(*loadedModel, options);
  }

  /// The tokens of every span segment of `call`, one vector per segment.
  static std::vector<std::vector<kv::TokenId>>
  spanSegments(const plan::Call &call) {
    std::vector<std::vector<kv::TokenId>> spans;
    for (const plan::PlanSegment &segment : call.segments)
      if (segment.kind == kv::SegmentKind::Span) {
        spans.emplace_back();
        for (const plan::Piece &piece : segment.pieces)
          spans.back().insert(spans.back().end(), piece.tokens.begin(),
                              piece.tokens.end());
      }
    return spans;
  }

  LoadedModel *loadedModel = nullptr;
  model::Model *model = nullptr;
  /// What makeExecutor's executors lay spans out with.
  kv::SpanOptions spanOptions;
};

/// Question-guided repair of 20 % of span blocks, over every layer.
const kv::SpanOptions kGuidedByBlock{
    kv::SpanContext::Prefix, 0, 1, 0, 1, 1, 20};

/// Every span accuracy mode (--span-context x --span-recompute).
const kv::SpanOptions kSpanModes[] = {
    {kv::SpanContext::Prefix, 0, 0},
    {kv::SpanContext::Isolated, 0, 0},
    {kv::SpanContext::Prefix, 1, 0},
    // With span scaling: flagged pages, split and merged apart.
    {kv::SpanContext::Isolated, 1, 0, 0, 0.8f, 1.2f},
    {kv::SpanContext::Prefix, 0, 1},
    {kv::SpanContext::Prefix, 0, 0, 20},
    {kv::SpanContext::Isolated, 0, 1, 20},
    // Question-guided repair: by block over every layer, and by token over
    // the last layer with neighbours.
    kGuidedByBlock,
    {kv::SpanContext::Isolated, 0, 0, 0, 1, 1, 30, kv::RepairLayers::Last,
     kv::RepairGranularity::Token, 1}};
using kv::spanModeName;
const kv::SpanOptions kIsolated{kv::SpanContext::Isolated, 0, 0};

/// The span modes a model is checked in: every mode on the synthetic
/// models (seconds a case); on SmolLM2 (minutes a mode) the default
/// (prefix+end1), isolated spans and the guided repair by block. The block
/// mechanics are the same on every model; SmolLM2 adds a real tokenizer and
/// trained weights, whose near-ties the three modes exercise.
std::vector<kv::SpanOptions> spanModesFor(const ModelCase &modelCase) {
  if (!modelCase.installed)
    return {std::begin(kSpanModes), std::end(kSpanModes)};
  return {kv::SpanOptions{}, kIsolated, kGuidedByBlock};
}

std::string query(const std::string &name, const std::string &system,
                  const std::string &spans, const std::string &question) {
  return "query " + name + " {\n  gen(max_tokens = 8, temperature = 0) {\n" +
         "    system \"" + system + "\"\n    plus { " + spans + " }\n" +
         "    user \"" + question + "\"\n  }\n}\n";
}

const std::string kAB =
    query("q", "Answer in one sentence.", "fragment pool fragment rope",
          "What happens when the pool is full?");
const std::string kBA =
    query("q", "Answer in one sentence.", "fragment rope fragment pool",
          "What happens when the pool is full?");

TEST_P(ExecutorTest, WarmCacheGivesTheColdAnswer) {
  plan::Plan plan = compile(kAB);
  auto executor = makeExecutor();
  auto cold = executor->run(plan);
  auto warm = executor->run(plan);
  EXPECT_EQ(answers(plan, warm), answers(plan, cold));
  EXPECT_EQ(reusedTokens(cold), 0u);
  EXPECT_GT(reusedTokens(warm), 0.9 * warm[0].stats.promptTokens);
  EXPECT_EQ(warm[0].stats.generatedTokens, 8u);
}

TEST_P(ExecutorTest, SpansHitInAnyOrderWithTheColdAnswerUnderBothRelocations) {
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  auto coldExecutor = makeExecutor();
  Answers cold = answers(ba, coldExecutor->run(ba));
  for (kv::RelocationMode mode :
       {kv::RelocationMode::Rerope, kv::RelocationMode::RopeInKernel}) {
    auto executor = makeExecutor(kv::CacheMode::Span, mode);
    executor->run(ab);
    auto warm = executor->run(ba);
    EXPECT_EQ(answers(ba, warm), cold)
        << "relocation "
        << (mode == kv::RelocationMode::Rerope ? "rerope" : "rope-in-kernel");
    // Both documents (every span block) came from the AB run, but for the
    // blocks the default mode recomputes in this call's context: at most
    // the recompute blocks of each span after the first.
    const plan::Call &call = ba.calls[0];
    uint32_t spanTokens = 0, numSpans = 0;
    for (const plan::PlanSegment &segment : call.segments)
      if (segment.kind == kv::SegmentKind::Span) {
        ++numSpans;
        for (const plan::Piece &piece : segment.pieces)
          spanTokens += uint32_t(piece.tokens.size());
      }
    const kv::SpanOptions defaults;
    const uint32_t recomputed =
        (numSpans - 1) * executor->options().blockSize *
        (defaults.recomputeBlocks + defaults.recomputeEndBlocks);
    EXPECT_GE(warm[0].stats.reusedTokens + recomputed, spanTokens);
    if (mode == kv::RelocationMode::Rerope)
      EXPECT_GT(warm[0].stats.relocatedTokens, 0u);
    else
      EXPECT_EQ(warm[0].stats.relocatedTokens, 0u);
  }
}

TEST_P(ExecutorTest, ASpanHitGivesTheLogitsOfTheMissUnderBothRelocations) {
  checkHitLogitsEqualMiss();
}

/// SmolLM2 with the default f16 K/V: the hit = miss check only (a second
/// SmolLM2 load; the other properties do not depend on the precision).
class DefaultKvExecutorTest : public ExecutorTest {};

TEST_P(DefaultKvExecutorTest,
       ASpanHitGivesTheLogitsOfTheMissUnderBothRelocations) {
  checkHitLogitsEqualMiss();
}

void ExecutorTest::checkHitLogitsEqualMiss() {
  // BA cold (every block computed) against BA after AB (both documents
  // reused at other offsets): the first token's logits agree to 1e-3 with
  // f32 K/V (1e-2 with f16, below) and the greedy answers are identical.
  // rope-in-kernel reuses unrotated K bit for bit at any precision; ReRoPE
  // turns the stored K (f16: the rounded K, rounded again, see Rerope.h).
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  for (const kv::SpanOptions &spanMode : spanModesFor(GetParam())) {
    spanOptions = spanMode;
    std::vector<kv::TokenId> answerPerRelocation[2];
    for (kv::RelocationMode mode :
         {kv::RelocationMode::Rerope, kv::RelocationMode::RopeInKernel}) {
      const std::string name =
          (mode == kv::RelocationMode::Rerope ? "rerope " : "rope-in-kernel ") +
          spanModeName(spanMode);
      auto cold = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
      auto miss = cold->run(ba);
      auto warm = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
      warm->run(ab);
      auto hit = warm->run(ba);
      ASSERT_GT(hit[0].stats.reusedTokens, 100u);
      ASSERT_EQ(hit[0].firstLogits.size(), miss[0].firstLogits.size());
      ASSERT_FALSE(miss[0].firstLogits.empty());
      double maxDifference = 0;
      for (size_t i = 0; i < miss[0].firstLogits.size(); ++i)
        maxDifference = std::max(
            maxDifference,
            double(std::fabs(hit[0].firstLogits[i] - miss[0].firstLogits[i])));
      std::printf("[ %s ] %s: hit vs miss logits max |diff| %.3g\n",
                  GetParam().name, name.c_str(), maxDifference);
      if (mode == kv::RelocationMode::RopeInKernel) {
        EXPECT_EQ(maxDifference, 0.0) << "unrotated K is reused bit for bit";
      } else if (exactKv()) {
        EXPECT_LE(maxDifference, 1e-3) << name;
      } else {
        // f16 K/V: under ReRoPE a span is computed at the offset it first
        // appears at, so every later layer attended to layer-0 K rounded to
        // f16 at other positions than the miss's. Measured on SmolLM2: 6.5e-3,
        // the same as before K/V were stored as f16 (f32 storage of
        // f16-rounded values, relocation not re-rounded: 6.5e-3); the tiny
        // models 2e-4..6e-4. A question-guided repair ranks span tokens by
        // the attention the question gives those K: with isolated spans
        // (moved on the hit, in place on the miss) a near-tie in the
        // ranking may recompute another token on the hit (tiny Llama, by
        // token over the last layer: 1.3e-2). The greedy answer must not
        // change.
        EXPECT_LE(maxDifference, spanMode.guidedPercent ? 2e-2 : 1e-2) << name;
      }
      auto argmax = [](const std::vector<float> &logits) {
        return std::max_element(logits.begin(), logits.end()) - logits.begin();
      };
      EXPECT_EQ(argmax(hit[0].firstLogits), argmax(miss[0].firstLogits))
          << name;
      EXPECT_EQ(hit[0].tokens, miss[0].tokens) << name;
      answerPerRelocation[mode == kv::RelocationMode::Rerope] = miss[0].tokens;
    }
    // The two relocation strategies give the same greedy answer.
    EXPECT_EQ(answerPerRelocation[0], answerPerRelocation[1])
        << spanModeName(spanMode);
  }
  spanOptions = {};
}

// A blend of every token recomputes every span token through every layer
// over its call's context: the same K/V as recomputing every span block as
// a causal run, up to the order of sums, so the same answer as full
// attention's.
TEST_P(ExecutorTest, ABlendOfEveryTokenIsFullAttention) {
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  for (kv::RelocationMode mode :
       {kv::RelocationMode::Rerope, kv::RelocationMode::RopeInKernel}) {
    spanOptions = {kv::SpanContext::Isolated, 64, 0, 0};
    auto recomputed = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
    recomputed->run(ab);
    auto reference = recomputed->run(ba);
    spanOptions = {kv::SpanContext::Isolated, 0, 0, 100};
    auto blended = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
    blended->run(ab);
    auto blend = blended->run(ba);
    spanOptions = {};
    ASSERT_FALSE(blend[0].firstLogits.empty());
    EXPECT_GT(blend[0].stats.blendedTokens, 0u);
    double maxDifference = 0;
    for (size_t i = 0; i < blend[0].firstLogits.size(); ++i)
      maxDifference = std::max(maxDifference,
                               double(std::fabs(blend[0].firstLogits[i] -
                                                reference[0].firstLogits[i])));
    std::printf(
        "[ %s ] blend100 vs recompute64 %s: max |diff| %.3g\n", GetParam().name,
        mode == kv::RelocationMode::Rerope ? "rerope" : "rope-in-kernel",
        maxDifference);
    EXPECT_LE(maxDifference, exactKv() ? 2e-3 : 2e-2);
    EXPECT_EQ(blend[0].tokens, reference[0].tokens);
  }
}

// A question-guided repair of every block recomputes every span block
// that missed context through every layer over its call's context: the
// same K/V as recomputing those spans whole as causal runs, up to the
// order of sums, so the answer of full attention. The probe ran and the
// repair recomputed only the later span's tokens.
TEST_P(ExecutorTest, AGuidedRepairOfEveryBlockIsFullAttention) {
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  for (kv::RelocationMode mode :
       {kv::RelocationMode::Rerope, kv::RelocationMode::RopeInKernel}) {
    spanOptions = {kv::SpanContext::Prefix, 64, 0};
    auto recomputed = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
    recomputed->run(ab);
    auto reference = recomputed->run(ba);
    spanOptions = {kv::SpanContext::Prefix, 0, 0, 0, 1, 1, 100};
    auto repaired = makeExecutor(kv::CacheMode::Span, mode, 16384, true);
    repaired->run(ab);
    auto hit = repaired->run(ba);
    spanOptions = {};
    ASSERT_FALSE(hit[0].firstLogits.empty());
    EXPECT_GT(hit[0].stats.reusedTokens, 100u);
    EXPECT_GT(hit[0].stats.probeTokens, 0u);
    uint32_t laterSpan = 0, spans = 0;
    for (const plan::PlanSegment &segment : ba.calls[0].segments)
      if (segment.kind == kv::SegmentKind::Span && spans++ > 0)
        for (const plan::Piece &piece : segment.pieces)
          laterSpan += uint32_t(piece.tokens.size());
    EXPECT_EQ(hit[0].stats.blendedTokens, laterSpan);
    double maxDifference = 0;
    for (size_t i = 0; i < hit[0].firstLogits.size(); ++i)
      maxDifference = std::max(maxDifference,
                               double(std::fabs(hit[0].firstLogits[i] -
                                                reference[0].firstLogits[i])));
    std::printf("[ %s ] guided100 vs recompute64 %s: max |diff| %.3g\n",
                GetParam().name,
                mode == kv::RelocationMode::Rerope ? "rerope"
                                                   : "rope-in-kernel",
                maxDifference);
    EXPECT_LE(maxDifference, exactKv() ? 2e-3 : 2e-2);
    EXPECT_EQ(hit[0].tokens, reference[0].tokens);
  }
}

/// The spacing of IEEE halves around |x|.
double halfUlp(double x) {
  int exponent;
  std::frexp(std::max(std::abs(x), std::ldexp(1.0, -14)), &exponent);
  return std::ldexp(1.0, exponent - 1 - 10);
}

TEST_P(ExecutorTest, ReropeRelocatedKeysEqualKeysComputedAtTheTargetPositions) {
  // Isolated spans: their blocks chain from the root (hashed below).
  spanOptions = kIsolated;
  // AB then BA under ReRoPE turns both documents' cached K to BA's
  // positions; a cold BA computes them there. Block by block (found by
  // hash in both pools), K and V agree to 1e-4 with f32 storage in every
  // layer. With f16 storage, layer 0 (a function of tokens and positions
  // only) has relocated K within 1.25 f16 ulps of each rotating pair's
  // magnitude (the stored rounding turned, plus the new rounding) and cold
  // K within 0.5, so 1.75 ulps apart at most, and identical V. Under ReRoPE
  // a span is computed at the offset it first appears at, so later layers
  // attended to layer-0 K rounded at other positions: with f16 their K/V
  // differ by ~1e-3 of the head's scale (bounded here at 1e-2).
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  auto warm = makeExecutor(kv::CacheMode::Span, kv::RelocationMode::Rerope);
  warm->run(ab);
  auto hit = warm->run(ba);
  ASSERT_GT(hit[0].stats.relocatedTokens, 0u);
  auto cold = makeExecutor(kv::CacheMode::Span, kv::RelocationMode::Rerope);
  cold->run(ba);
  const backend::KvStorage &hitKv = warm->kvStorage(),
                           &missKv = cold->kvStorage();
  const backend::KvStorageConfig &shape = hitKv.config();
  const cpu::RopeConfig &rope = model->ropeConfig();
  const int half = rope.rotaryDim / 2;
  auto partner = [&](int dim) {
    if (dim >= rope.rotaryDim)
      return -1;
    if (rope.order == cpu::RopeOrder::Normal)
      return dim ^ 1;
    return dim < half ? dim + half : dim - half;
  };
  const kv::BlockHasher &hasher = warm->hasher();
  size_t blocksCompared = 0;
  double worst = 0; // in units of the allowed error
  for (const std::vector<kv::TokenId> &span : spanSegments(ba.calls[0])) {
    llvm::SmallVector<kv::BlockHash, 16> hashes;
    hasher.hashChain(hasher.root(), span, warm->options().blockSize, hashes);
    for (const kv::BlockHash &hash : hashes) {
      std::optional<kv::BlockId> hitBlock = warm->pool().lookup(hash);
      std::optional<kv::BlockId> missBlock = cold->pool().lookup(hash);
      ASSERT_TRUE(hitBlock && missBlock) << "span block " << hash.str();
      ASSERT_EQ(warm->pool().storedPosition(*hitBlock),
                cold->pool().storedPosition(*missBlock));
      const int valid = int(cold->pool().numTokens(*missBlock));
      ASSERT_EQ(int(warm->pool().numTokens(*hitBlock)), valid);
      for (int layer = 0; layer < shape.numLayers; ++layer)
        for (int head = 0; head < shape.numKvHeads; ++head)
          for (int slot = 0; slot < valid; ++slot) {
            // The head's scale at this slot (for later f16 layers).
            double keyScale = 0, valueScale = 0;
            for (int dim = 0; dim < shape.headDim; ++dim) {
              keyScale =
                  std::max(keyScale, double(std::abs(missKv.key(
                                         layer, *missBlock, head, slot, dim))));
              valueScale = std::max(
                  valueScale, double(std::abs(missKv.value(layer, *missBlock,
                                                           head, slot, dim))));
            }
            for (int dim = 0; dim < shape.headDim; ++dim) {
              double got = hitKv.key(layer, *hitBlock, head, slot, dim);
              double expected = missKv.key(layer, *missBlock, head, slot, dim);
              int other = partner(dim);
              double magnitude =
                  other < 0 ? std::abs(expected)
                            : std::hypot(expected,
                                         double(missKv.key(layer, *missBlock,
                                                           head, slot, other)));
              double gotValue = hitKv.value(layer, *hitBlock, head, slot, dim);
              double value = missKv.value(layer, *missBlock, head, slot, dim);
              double keyAllowed, valueAllowed;
              if (exactKv()) {
                keyAllowed = valueAllowed = 1e-4;
              } else if (layer == 0) {
                // Layer 0's K/V depend on the tokens and positions only.
                keyAllowed = 1.75 * halfUlp(magnitude) + 1e-6;
                valueAllowed = 1e-9; // bit for bit
              } else {
                // Later layers attended to f16 K rounded at other
                // positions: close, not within an ulp of each element.
                keyAllowed = 1e-2 * keyScale + 1e-6;
                valueAllowed = 1e-2 * valueScale + 1e-6;
              }
              worst = std::max(worst, std::abs(got - expected) / keyAllowed);
              worst =
                  std::max(worst, std::abs(gotValue - value) / valueAllowed);
            }
          }
      ++blocksCompared;
    }
  }
  EXPECT_GT(blocksCompared, 4u);
  EXPECT_LE(worst, 1.0);
}

TEST_P(ExecutorTest, PrefixCachingAgreesWithNoCaching) {
  plan::Plan ab = compile(kAB), ba = compile(kBA);
  auto prefix = makeExecutor(kv::CacheMode::Prefix);
  auto off = makeExecutor(kv::CacheMode::Off);
  prefix->run(ab);
  off->run(ab);
  auto prefixWarm = prefix->run(ab);
  auto offAgain = off->run(ab);
  EXPECT_EQ(answers(ab, prefixWarm), answers(ab, offAgain));
  EXPECT_GT(reusedTokens(prefixWarm), 0u);
  EXPECT_EQ(reusedTokens(offAgain), 0u);
  // Stock prefix caching cannot reuse reordered documents.
  auto prefixBA = prefix->run(ba);
  EXPECT_EQ(answers(ba, prefixBA), answers(ba, off->run(ba)));
  EXPECT_LT(reusedTokens(prefixBA), 32u);
}

TEST_P(ExecutorTest, OneSpanAtTwoOffsetsInOneStepGivesEachItsSoloAnswer) {
  SKIP_OFF_HOST_KERNEL_PATH();
  // Warm `pool` at one offset, then two queries that want it at two other
  // offsets, admitted into the same step.
  plan::Plan warmUp = compile(query("w", "Hi.", "fragment pool", "Hi?"));
  std::string short_ =
      query("near", "Be brief.", "fragment pool", "What does the pool evict?");
  std::string long_ = query("far",
                            "You are a careful assistant. Read the "
                            "document and answer with one short sentence.",
                            "fragment pool", "What does the pool evict?");
  plan::Plan both = compile(short_ + long_);
  // Isolated spans (the warm-up has another prefix) under ReRoPE: the
  // strategy where one block at two positions needs CIDRA.
  spanOptions = kIsolated;
  auto executor = makeExecutor(kv::CacheMode::Span, kv::RelocationMode::Rerope);
  executor->run(warmUp);
  auto together = executor->run(both);
  EXPECT_GT(together[0].stats.relocatedTokens, 0u);
  EXPECT_GT(together[1].stats.relocatedTokens, 0u);
  Answers soloNear =
      answers(compile(short_), makeExecutor()->run(compile(short_)));
  Answers soloFar =
      answers(compile(long_), makeExecutor()->run(compile(long_)));
  Answers result = answers(both, together);
  EXPECT_EQ(result["near"], soloNear["near"]);
  EXPECT_EQ(result["far"], soloFar["far"]);
}

TEST_P(ExecutorTest, CallsSharingSpansInOneStepGiveTheirSoloAnswers) {
  SKIP_OFF_HOST_KERNEL_PATH();
  // The same prefix with the spans in both orders, run together and alone,
  // in every span mode: concurrent calls that share spans agree with solo
  // runs.
  const std::string ab =
      query("ab", "Answer in one sentence.", "fragment pool fragment rope",
            "What happens when the pool is full?");
  const std::string ba =
      query("ba", "Answer in one sentence.", "fragment rope fragment pool",
            "What happens when the pool is full?");
  for (const kv::SpanOptions &spanMode : spanModesFor(GetParam())) {
    spanOptions = spanMode;
    plan::Plan both = compile(ab + ba);
    Answers together = answers(both, makeExecutor()->run(both));
    EXPECT_EQ(together["ab"],
              answers(compile(ab), makeExecutor()->run(compile(ab)))["ab"])
        << spanModeName(spanMode);
    EXPECT_EQ(together["ba"],
              answers(compile(ba), makeExecutor()->run(compile(ba)))["ba"])
        << spanModeName(spanMode);
  }
}

TEST_P(ExecutorTest, ACacheFourTimesTooSmallChangesNoAnswer) {
  SKIP_OFF_HOST_KERNEL_PATH();
  std::string bulk =
      query("a", "Be brief.", "fragment pool fragment rope", "Summarize.") +
      query("b", "Be brief.", "fragment rope fragment bulk", "Summarize.") +
      query("c", "Be brief.", "fragment bulk fragment pool", "Summarize.") +
      query("d", "Be brief.", "fragment pool fragment rope fragment bulk",
            "Summarize.");
  plan::Plan plan = compile(bulk);
  // Every span mode under rope-in-kernel, and the prefix context under
  // ReRoPE (its spans move before their tails, which needs free blocks).
  std::vector<std::pair<kv::SpanOptions, kv::RelocationMode>> cases;
  // Blends only on the synthetic models: under preemption SmolLM2
  // recomputes whole blends over and over (minutes under a shared CPU),
  // and the block mechanics are the same on every model.
  for (const kv::SpanOptions &spanMode : spanModesFor(GetParam()))
    if (!spanMode.repairs() || !GetParam().installed)
      cases.push_back({spanMode, kv::RelocationMode::RopeInKernel});
  cases.push_back({kSpanModes[0], kv::RelocationMode::Rerope});
  for (const auto &[spanMode, relocation] : cases) {
    spanOptions = spanMode;
    const std::string name =
        spanModeName(spanMode) +
        (relocation == kv::RelocationMode::Rerope ? " rerope" : "");
    auto roomy = makeExecutor(kv::CacheMode::Span, relocation);
    auto reference = roomy->run(plan);
    // A quarter of what the workload touches, but room for its largest
    // call: its segments' blocks (and recomputed span blocks, blends), its
    // generated tokens and one copy-on-write block.
    const unsigned blockSize = roomy->options().blockSize;
    int64_t workload = 0, largestCall = 0;
    for (const plan::Call &call : plan.calls) {
      int64_t blocks =
          2 + (reference[call.id].stats.generatedTokens + blockSize - 1) /
                  blockSize;
      for (const plan::PlanSegment &segment : call.segments) {
        size_t tokens = 0;
        for (const plan::Piece &piece : segment.pieces)
          tokens += piece.tokens.size();
        blocks += int64_t((tokens + blockSize - 1) / blockSize);
        if (segment.kind == plan::SegmentKind::Span)
          blocks += spanMode.recomputeBlocks + spanMode.recomputeEndBlocks +
                    (spanMode.repairs()
                         ? int64_t((tokens + blockSize - 1) / blockSize)
                         : 0);
      }
      workload += blocks * blockSize;
      largestCall = std::max(largestCall, blocks * blockSize);
    }
    ASSERT_GT(workload / 4, 0);
    auto tight = makeExecutor(kv::CacheMode::Span, relocation,
                              std::max(workload / 4, largestCall));
    EXPECT_LE(tight->pool().numBlocks() * blockSize, workload / 2) << name;
    auto constrained = tight->run(plan);
    EXPECT_EQ(answers(plan, constrained), answers(plan, reference)) << name;
    auto again = tight->run(plan);
    EXPECT_EQ(answers(plan, again), answers(plan, reference)) << name;
  }
  spanOptions = {};
}

TEST_P(ExecutorTest, ABulkAnswersLikeItsQueriesOneByOne) {
  SKIP_OFF_HOST_KERNEL_PATH();
  std::string a =
      query("a", "Be brief.", "fragment pool fragment rope", "What is ReRoPE?");
  std::string b =
      query("b", "Be brief.", "fragment rope fragment bulk", "What is a bulk?");
  plan::Plan bulk = compile(a + b);
  Answers together = answers(bulk, makeExecutor()->run(bulk));
  EXPECT_EQ(together["a"],
            answers(compile(a), makeExecutor()->run(compile(a)))["a"]);
  EXPECT_EQ(together["b"],
            answers(compile(b), makeExecutor()->run(compile(b)))["b"]);
}

TEST_P(ExecutorTest, AStopBetweenStepsFailsWhatIsUnfinishedAndFreesItsBlocks) {
  SKIP_OFF_HOST_KERNEL_PATH();
  std::string a =
      query("a", "Be brief.", "fragment pool fragment rope", "What is ReRoPE?");
  std::string b =
      query("b", "Be brief.", "fragment rope fragment bulk", "What is a bulk?");
  plan::Plan bulk = compile(a + b);
  std::unique_ptr<sched::Executor> executor = makeExecutor();
  const uint32_t freeBefore = executor->pool().numFreeBlocks();
  unsigned steps = 0;
  std::vector<sched::CallOutcome> stopped =
      executor->run(bulk, nullptr, nullptr, [&] { return ++steps > 2; });
  EXPECT_EQ(steps, 3u);
  ASSERT_EQ(stopped.size(), bulk.calls.size());
  for (const sched::CallOutcome &outcome : stopped) {
    EXPECT_FALSE(outcome.succeeded);
    EXPECT_EQ(outcome.error, "interrupted");
  }
  // Nothing stays referenced: the cache is whole for the next run, which
  // answers as a fresh executor does.
  EXPECT_EQ(executor->pool().numFreeBlocks(), freeBefore);
  Answers after = answers(bulk, executor->run(bulk));
  EXPECT_EQ(after, answers(bulk, makeExecutor()->run(bulk)));
}

} // namespace
} // namespace spanc

namespace spanc {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Models, ExecutorTest,
    ::testing::Values(ModelCase{"SmolLM2_f32",
                                "models/SmolLM2-135M-Instruct.Q4_1.gguf", true,
                                false},
                      ModelCase{"TinyLlama_f32",
                                "test/data/synthetic/tiny-llama-synthetic.gguf",
                                false, false},
                      ModelCase{"TinyLlama_f16",
                                "test/data/synthetic/tiny-llama-synthetic.gguf",
                                false, true},
                      ModelCase{"TinyQwen2_f32",
                                "test/data/synthetic/tiny-qwen2-synthetic.gguf",
                                false, false},
                      ModelCase{"TinyQwen2_f16",
                                "test/data/synthetic/tiny-qwen2-synthetic.gguf",
                                false, true}),
    [](const ::testing::TestParamInfo<ModelCase> &info) {
      return std::string(info.param.name);
    });

INSTANTIATE_TEST_SUITE_P(
    Models, DefaultKvExecutorTest,
    ::testing::Values(ModelCase{
        "SmolLM2_f16", "models/SmolLM2-135M-Instruct.Q4_1.gguf", true, true}),
    [](const ::testing::TestParamInfo<ModelCase> &info) {
      return std::string(info.param.name);
    });

} // namespace
} // namespace spanc
