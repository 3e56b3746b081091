//===- EngineBench.cpp - Prefill and decode throughput --------------------===//

#include "bench/engine/EngineBench.h"

#include "runtime/backend/SequenceRunner.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace spanc::bench {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle]
                           : (values[middle - 1] + values[middle]) / 2;
}

double standardDeviation(const std::vector<double> &values) {
  if (values.size() < 2)
    return 0;
  double mean = 0;
  for (double value : values)
    mean += value;
  mean /= double(values.size());
  double sum = 0;
  for (double value : values)
    sum += (value - mean) * (value - mean);
  return std::sqrt(sum / double(values.size() - 1));
}

llvm::Expected<EngineBenchResult>
runEngineBench(const EngineBenchOptions &options) {
  EngineBenchResult result;
  auto loadStart = std::chrono::steady_clock::now();
  model::ModelOptions modelOptions;
  modelOptions.forceF32 = options.forceF32;
  modelOptions.gemmKernel = options.gemmKernel;
  modelOptions.gemmWeightCopy = options.gemmWeightCopy;
  modelOptions.quantizedPrompt = options.quantizedPrompt;
  modelOptions.numerics = options.numerics;
  auto model = model::Model::load(options.modelPath, modelOptions);
  if (!model)
    return model.takeError();
  result.loadSeconds = secondsSince(loadStart);
  result.precision = cpu::gemmPrecisionName((*model)->gemmPrecision());
  result.gemmKernel = cpu::gemmKernelName((*model)->gemmKernel());
  result.quantizedPrompt = (*model)->quantizedPromptRows();
  result.prefillFlops = (*model)->config().prefillFlops(options.promptTokens);
  const int64_t context = (*model)->config().contextLength;
  if (context > 0 && options.promptTokens > context)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "engine: --prompt-tokens %d exceeds the model's context (%lld tokens)",
        options.promptTokens, static_cast<long long>(context));
  if (context > 0 &&
      int64_t(options.generateDepth) + options.generateTokens > context)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "engine: --gen-depth %d + --gen-tokens %d exceed the model's context "
        "(%lld tokens)",
        options.generateDepth, options.generateTokens,
        static_cast<long long>(context));
  auto runner = backend::SequenceRunner::create(
      **model, std::max(options.promptTokens,
                        options.generateDepth + options.generateTokens));
  if (!runner)
    return runner.takeError();

  // Random tokens, as llama-bench uses; fixed seed so runs are comparable.
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(
      0, int32_t((*model)->config().vocabSize) - 1);
  std::vector<int32_t> prompt(size_t(options.promptTokens));
  for (int32_t &id : prompt)
    id = token(rng);
  std::vector<int32_t> depth(size_t(options.generateDepth));
  for (int32_t &id : depth)
    id = token(rng);
  // Tokens per forward pass of a prefill of `tokens` (0: all in one).
  auto chunkOf = [&](int64_t tokens) -> int64_t {
    return options.prefillChunk > 0 ? options.prefillChunk : tokens;
  };

  // As llama-bench does: every prefill repetition, then every decode
  // repetition, each series after its own warm-up (repetition 0: primitive
  // creation, page faults). Interleaving them would time each prefill after
  // a decode pass over the 4/8-bit weights has pushed the bf16 ones out of
  // the last-level cache.
  // The `prefix` tokens are prefilled, untimed and unprofiled, after each
  // reset.
  auto timeSeries = [&](int64_t tokens, llvm::function_ref<llvm::Error()> run,
                        std::vector<double> &tokensPerSecond,
                        backend::ForwardProfile &profile,
                        llvm::ArrayRef<int32_t> prefix = {}) -> llvm::Error {
    for (int repetition = 0; repetition <= options.repetitions; ++repetition) {
      bool measured = repetition > 0;
      backend::CpuForwardPass &pass = *(*runner)->cpuPass();
      pass.enableProfile(false);
      (*runner)->reset();
      if (!prefix.empty())
        if (auto logits =
                (*runner)->append(prefix, chunkOf(int64_t(prefix.size())));
            !logits)
          return logits.takeError();
      pass.enableProfile(options.profile && measured);
      pass.resetProfile();
      auto start = std::chrono::steady_clock::now();
      if (llvm::Error error = run())
        return error;
      double seconds = secondsSince(start);
      if (measured) {
        tokensPerSecond.push_back(double(tokens) / seconds);
        profile += pass.profile();
      }
    }
    return llvm::Error::success();
  };
  if (options.promptTokens > 0)
    if (llvm::Error error = timeSeries(
            options.promptTokens,
            [&]() -> llvm::Error {
              auto logits =
                  (*runner)->append(prompt, chunkOf(options.promptTokens));
              return logits ? llvm::Error::success() : logits.takeError();
            },
            result.prefillTokensPerSecond, result.prefillProfile))
      return error;
  if (options.generateTokens > 0)
    if (llvm::Error error = timeSeries(
            options.generateTokens,
            [&]() -> llvm::Error {
              int32_t next = prompt.empty() ? 1 : prompt[0];
              for (int step = 0; step < options.generateTokens; ++step) {
                auto logits = (*runner)->append(llvm::ArrayRef<int32_t>(next));
                if (!logits)
                  return logits.takeError();
                next = token(rng);
              }
              return llvm::Error::success();
            },
            result.decodeTokensPerSecond, result.decodeProfile, depth))
      return error;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  result.peakRssBytes = int64_t(usage.ru_maxrss) * 1024;
  return result;
}

} // namespace spanc::bench
