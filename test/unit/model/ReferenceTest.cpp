//===- ReferenceTest.cpp - The CPU engine against llama.cpp on SmolLM2 ----===//
//
// test/data/reference holds llama.cpp's outputs on the same GGUF (README.md
// there says how they were made): greedy 32-token continuations of raw
// prompts, given as token ids, with llama.cpp's top-2 log-probabilities at
// each step, and a perplexity over a fixed text; test/data/engine has the
// same continuations with llama.cpp's flash attention off.
//
// With Numerics::LlamaCpp the engine must meet the rule: every
// prompt's 32 greedy tokens identical to llama.cpp's, a divergence allowed
// only where llama.cpp's top-2 logits differ by less than 1e-3, and at
// every step our margin between llama.cpp's top two within 1e-3 of its own
// (the mode reproduces llama.cpp's arithmetic, so the margins agree to
// float printing precision). The default numerics (bf16 prefill GEMMs, f32
// or AMX attention) round differently; they are held to llama.cpp's own
// cross-configuration noise (near-ties, see kNearTieMargin). A prompt's
// comparison ends at its first divergence; each prompt's result is
// printed. Perplexity must be within 1% in both modes. Skipped when the
// model or the reference files are absent.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/SequenceRunner.h"
#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"
#include "runtime/model/Model.h"
#include "runtime/model/Sampler.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace {

using namespace spanc;
using namespace spanc::model;
using spanc::backend::computePerplexity;
using spanc::backend::SequenceRunner;

// For the default numerics: llama.cpp does not reproduce itself token for
// token across its own configurations: with flash attention off instead of
// auto, its greedy continuations of the same prompts diverge on 7 of 10
// prompts, at top-2 margins up to 0.22, and the log-probabilities of its top
// two differ by 0.069 on average (0.40 at most) (test/data/engine/README.md).
// The 1e-3 tie-break rule cannot hold against that noise, so a divergence is
// accepted where llama.cpp's margin is below kNearTieMargin and ours between
// the two picks below kOurNearTieMargin, and the mean log-probability
// difference stays at that noise level. The counts of exact ties are printed
// too.
constexpr double kNearTieMargin = 0.5;
// Our margin at such a step is llama.cpp's (near 0) plus our own rounding
// noise, which moves it by a few tenths between equally exact GEMM kernels:
// on a Zen 4 host oneDNN's bf16 matmul and spanc's AVX-512 BF16 kernel, whose
// products agree to ~1e-7 (both within 1e-7 of the exact sum of the bf16
// operands, bench/kernels/gemm_bench), give 0.358 and 0.568 at the "math"
// prompt's step 10, where llama.cpp's margin is 0.0098: a difference of 1e-7
// flips an activation's bf16 or int8 rounding now and then, a step of 2^-8 or
// 1/127 that the layers carry on. Per-token log-probability differences reach
// 0.47-0.57 in the same runs.
constexpr double kOurNearTieMargin = 0.75;

// One thread: the results do not depend on it, and on a loaded shared
// machine two spinning OpenMP threads slow decoding down many times.
const int kSingleThread = (omp_set_num_threads(1), 1);
constexpr double kMeanLogprobTolerance = 0.1;

std::string rootPath(const std::string &relative) {
  // Runfiles first (the test's data dependency), then the workspace.
  if (llvm::sys::fs::exists(relative))
    return relative;
  const char *root = std::getenv("SPANC_ROOT");
  return std::string(root ? root : ".") + "/" + relative;
}

std::string modelPath() {
  return rootPath("models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

std::optional<nlohmann::json> readJson(const std::string &relative) {
  auto buffer = llvm::MemoryBuffer::getFile(rootPath(relative));
  if (!buffer)
    return std::nullopt;
  return nlohmann::json::parse((*buffer)->getBuffer().str());
}

/// How a greedy comparison judges a divergence.
enum class GreedyRule {
  /// The rule: the continuations must be identical token for token,
  /// except at a step where llama.cpp's top-2 logits differ by less than
  /// kTieMargin (a tie-break); the rest of that prompt is then not
  /// comparable.
  TieBreakOnly,
  /// Near-ties only (kNearTieMargin, kOurNearTieMargin) and a mean
  /// log-probability difference
  /// at llama.cpp's own cross-configuration noise: what the default
  /// numerics, which round differently from llama.cpp, can promise.
  NearTie,
};

constexpr double kTieMargin = 1e-3;

/// Greedy continuations against llama.cpp's. Prints one line per prompt:
/// tokens matched, the first divergence and llama.cpp's margin there.
void checkGreedyContinuations(const ModelOptions &options, GreedyRule rule,
                              const std::string &referenceFile =
                                  "test/data/reference/greedy_smollm2.json") {
  if (!llvm::sys::fs::exists(modelPath()))
    GTEST_SKIP() << "model not found at " << modelPath();
  std::optional<nlohmann::json> reference = readJson(referenceFile);
  if (!reference)
    GTEST_SKIP() << referenceFile << " not found";
  auto model = Model::load(modelPath(), options);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  auto tokenizer = Tokenizer::fromGguf((*model)->file());
  ASSERT_TRUE(bool(tokenizer)) << llvm::toString(tokenizer.takeError());
  auto runner = SequenceRunner::create(**model, 1024);
  ASSERT_TRUE(bool(runner)) << llvm::toString(runner.takeError());

  const auto &cases = (*reference)["cases"];
  ASSERT_GE(cases.size(), 8u);
  int matchedTokens = 0, comparedTokens = 0, ties = 0, divergences = 0;
  double maxLogprobDifference = 0, totalLogprobDifference = 0;
  int logprobCount = 0;
  for (const auto &testCase : cases) {
    const std::string name = testCase["name"];
    std::vector<int32_t> prompt = testCase["prompt_ids"];
    std::vector<int32_t> expected = testCase["continuation_ids"];
    const auto &top2 = testCase["top2"];
    (*runner)->reset();
    auto logits = (*runner)->append(prompt);
    ASSERT_TRUE(bool(logits))
        << name << ": " << llvm::toString(logits.takeError());
    size_t matched = 0;
    std::string divergence;
    for (size_t step = 0; step < expected.size(); ++step) {
      int32_t ours = Sampler::argmax(*logits);
      ++comparedTokens;
      // How far our log-probabilities of llama.cpp's top two are from its.
      {
        float maxLogit = *std::max_element(logits->begin(), logits->end());
        double sum = 0;
        for (float logit : *logits)
          sum += std::exp(double(logit) - maxLogit);
        for (int rank = 0; rank < 2; ++rank) {
          int32_t id = top2[step]["ids"][rank];
          double ourLogprob =
              double((*logits)[size_t(id)]) - maxLogit - std::log(sum);
          double difference =
              std::abs(ourLogprob - top2[step]["logprobs"][rank].get<double>());
          maxLogprobDifference = std::max(maxLogprobDifference, difference);
          totalLogprobDifference += difference;
          ++logprobCount;
        }
      }
      if (rule == GreedyRule::TieBreakOnly) {
        // Our margin between llama.cpp's top two against its own.
        double ourTopMargin =
            double((*logits)[size_t(int32_t(top2[step]["ids"][0]))]) -
            (*logits)[size_t(int32_t(top2[step]["ids"][1]))];
        EXPECT_NEAR(ourTopMargin, top2[step]["logit_margin"].get<double>(),
                    kTieMargin)
            << name << ": step " << step;
      }
      if (ours != expected[step]) {
        double margin = top2[step]["logit_margin"];
        double ourMargin =
            double((*logits)[size_t(ours)]) - (*logits)[size_t(expected[step])];
        divergence = "diverges at step " + std::to_string(step) + ": ours " +
                     std::to_string(ours) + " '" +
                     (*tokenizer)->tokenToPiece(ours) + "', llama.cpp " +
                     std::to_string(expected[step]) + " '" +
                     (*tokenizer)->tokenToPiece(expected[step]) +
                     "', llama.cpp's top-2 margin " + std::to_string(margin) +
                     ", ours " + std::to_string(ourMargin);
        ++divergences;
        if (margin < kTieMargin)
          ++ties;
        if (rule == GreedyRule::TieBreakOnly) {
          EXPECT_LT(margin, kTieMargin) << name << ": " << divergence;
        } else {
          // A near-tie that llama.cpp itself resolves either way, for both
          // engines.
          EXPECT_LT(margin, kNearTieMargin) << name << ": " << divergence;
          EXPECT_LT(ourMargin, kOurNearTieMargin) << name << ": " << divergence;
        }
        break;
      }
      ++matched;
      ++matchedTokens;
      logits = (*runner)->append(llvm::ArrayRef<int32_t>(ours));
      ASSERT_TRUE(bool(logits)) << llvm::toString(logits.takeError());
    }
    std::cout << "  " << name << ": " << matched << "/" << expected.size()
              << " tokens match"
              << (divergence.empty() ? "" : "; " + divergence) << "\n";
  }
  std::cout << "greedy (" << numericsName((*model)->numerics()).str()
            << " numerics, " << gemmPrecisionName((*model)->gemmPrecision())
            << " GEMMs): " << matchedTokens << " of " << comparedTokens
            << " tokens identical to llama.cpp over " << cases.size()
            << " prompts; " << divergences << " divergences, " << ties
            << " of them at margins < 1e-3; |log-prob difference| of "
               "llama.cpp's top two: mean "
            << totalLogprobDifference / std::max(1, logprobCount) << ", max "
            << maxLogprobDifference << "\n";
  if (rule == GreedyRule::NearTie) {
    EXPECT_GE(matchedTokens, comparedTokens * 85 / 100);
    EXPECT_LT(totalLogprobDifference / std::max(1, logprobCount),
              kMeanLogprobTolerance);
  }
}

/// Perplexity over the reference text, llama-perplexity's protocol (see
/// test/data/reference/README.md), within 1% of llama.cpp's.
void checkPerplexity(const ModelOptions &options) {
  if (!llvm::sys::fs::exists(modelPath()))
    GTEST_SKIP() << "model not found at " << modelPath();
  std::optional<nlohmann::json> reference =
      readJson("test/data/reference/perplexity_smollm2.json");
  auto text = llvm::MemoryBuffer::getFile(
      rootPath("test/data/reference/perplexity_text.txt"));
  if (!reference || !text)
    GTEST_SKIP() << "perplexity reference files not found";
  auto model = Model::load(modelPath(), options);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  auto tokenizer = Tokenizer::fromGguf((*model)->file());
  ASSERT_TRUE(bool(tokenizer)) << llvm::toString(tokenizer.takeError());
  std::vector<int32_t> tokens =
      (*tokenizer)->encode((*text)->getBuffer(), /*parseSpecial=*/false);
  ASSERT_EQ(int64_t(tokens.size()), (*reference)["tokens"].get<int64_t>());
  const int64_t context = (*reference)["n_ctx"];
  auto runner = SequenceRunner::create(**model, context);
  ASSERT_TRUE(bool(runner)) << llvm::toString(runner.takeError());
  int32_t bos = (*tokenizer)->addBosByDefault() ? (*tokenizer)->bosId() : -1;
  auto result = computePerplexity(**runner, tokens, context, bos);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  const double expected = (*reference)["ppl"];
  EXPECT_EQ(result->chunks, (*reference)["chunks"].get<int64_t>());
  EXPECT_EQ(result->scoredTokens,
            result->chunks * (*reference)["scored_per_chunk"].get<int64_t>());
  EXPECT_NEAR(result->perplexity, expected, 0.01 * expected);
  std::cout << "perplexity: spanc " << result->perplexity << ", llama.cpp "
            << expected << " (" << result->chunks << " chunks of " << context
            << ", " << result->scoredTokens << " scored tokens, "
            << gemmPrecisionName((*model)->gemmPrecision()) << " GEMMs)\n";
}

TEST(LlamaCppReference, PerplexityWithinOnePercent) {
  checkPerplexity(ModelOptions());
}

/// llama.cpp's numerics reproduce its AVX-512 kernels' rounding, so they
/// exist on the AVX-512 paths only (Model::load refuses them elsewhere);
/// the default numerics are tested on every path.
#define SKIP_WITHOUT_LLAMA_CPP_NUMERICS()                                      \
  if (!spanc::cpu::hasLlamaCppNumerics() ||                                    \
      !spanc::cpu::hasHalfAccumulatingAttention())                             \
  GTEST_SKIP() << "llama.cpp numerics need the AVX-512 kernel paths"

TEST(LlamaCppReference, GreedyContinuationsMatchTokenForToken) {
  // The rule, with llama.cpp's numerics (its default: flash
  // attention on).
  SKIP_WITHOUT_LLAMA_CPP_NUMERICS();
  ModelOptions options;
  options.numerics = Numerics::LlamaCpp;
  checkGreedyContinuations(options, GreedyRule::TieBreakOnly);
}

TEST(LlamaCppReference, LlamaNumericsPerplexityWithinOnePercent) {
  SKIP_WITHOUT_LLAMA_CPP_NUMERICS();
  ModelOptions options;
  options.numerics = Numerics::LlamaCpp;
  checkPerplexity(options);
}

TEST(LlamaCppReference, DefaultNumericsGreedyContinuationsAgreeUpToNearTies) {
  checkGreedyContinuations(ModelOptions(), GreedyRule::NearTie);
}

TEST(LlamaCppReference, GreedyContinuationsMatchWithoutFlashAttention) {
  checkGreedyContinuations(ModelOptions(), GreedyRule::NearTie,
                           "test/data/engine/greedy_smollm2_fa_off.json");
}

TEST(LlamaCppReference, GreedyContinuationsMatchWithF32Gemms) {
  ModelOptions options;
  options.forceF32 = true;
  checkGreedyContinuations(options, GreedyRule::NearTie);
}

} // namespace
