//===- EngineBench.h - Prefill and decode throughput, llama-bench style ---===//
//
// The engine half of `spanc bench engine`: ppN (one forward pass over N
// random tokens from an empty cache) and tgN (N one-token decode steps from
// an empty cache), each repeated after a warm-up, as llama-bench measures
// them, plus peak RSS and an optional per-op profile.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_ENGINE_ENGINEBENCH_H
#define SPANC_BENCH_ENGINE_ENGINEBENCH_H

#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/model/Model.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace spanc::bench {

struct EngineBenchOptions {
  std::string modelPath;
  int promptTokens = 512;
  /// Tokens per forward pass of the prefill (0: the whole prompt in one):
  /// llama-bench's default micro-batch, whose activations it sizes for.
  int prefillChunk = 512;
  int generateTokens = 128;
  /// Tokens of context the decode test starts from (llama-bench's -d,
  /// "tg128 @ d4096"): prefilled, untimed, before each repetition.
  int generateDepth = 0;
  int repetitions = 5;
  bool forceF32 = false;
  cpu::GemmKernel gemmKernel = cpu::GemmKernel::Amx;
  bool gemmWeightCopy = false; ///< ModelOptions::gemmWeightCopy
  bool quantizedPrompt = true; ///< ModelOptions::quantizedPrompt
  model::Numerics numerics = model::Numerics::Default;
  bool profile = false;
};

struct EngineBenchResult {
  std::vector<double> prefillTokensPerSecond; ///< one per repetition
  std::vector<double> decodeTokensPerSecond;
  double loadSeconds = 0;
  int64_t peakRssBytes = 0;
  std::string precision;
  std::string gemmKernel; ///< "amx" or "onednn"
  /// Prompt rows took int8 activations (Model::quantizedPromptRows).
  bool quantizedPrompt = false;
  /// Floating-point operations of one ppN pass (ModelConfig::prefillFlops:
  /// the output head for the last token only, as llama-bench's ppN and
  /// spanc's prefill compute it).
  double prefillFlops = 0;
  backend::ForwardProfile
      prefillProfile; ///< summed over repetitions (if profiled)
  backend::ForwardProfile decodeProfile;
};

llvm::Expected<EngineBenchResult>
runEngineBench(const EngineBenchOptions &options);

/// Median, and the sample standard deviation, of `values`.
double median(std::vector<double> values);
double standardDeviation(const std::vector<double> &values);

} // namespace spanc::bench

#endif // SPANC_BENCH_ENGINE_ENGINEBENCH_H
