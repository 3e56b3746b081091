//===- ModelSession.h - One model, its tokenizer and executors for a bench ===//
//
// What every benchmark that runs a model shares: the model loads once per
// process, programs compile from .span text through the default pipeline
// (codegen::compileToPlan) and run on executors of any cache mode, so every
// configuration of a benchmark is measured side by side in one run; plus
// small helpers for result files (literals, ratios, intervals).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_MODELSESSION_H
#define SPANC_BENCH_COMMON_MODELSESSION_H

#include "bench/common/Bench.h"
#include "codegen/CompilePipeline.h"
#include "plan/Plan.h"
#include "runtime/kv/SpanLayout.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spanc::bench {

/// Totals over executor runs, for reports.
struct RunTotals {
  size_t calls = 0;
  uint64_t promptTokens = 0, computedTokens = 0, reusedTokens = 0,
           generatedTokens = 0;
  /// Prompt tokens of spans (children of a plus), and of those the tokens a
  /// repair recomputed through every layer (CallStats::blendedTokens).
  uint64_t spanTokens = 0, repairedTokens = 0;
  /// A question-guided repair's first pass (CallStats::probeSeconds).
  uint64_t probes = 0;
  double probeSeconds = 0;
  double seconds = 0;
  RunTotals &operator+=(const RunTotals &other);
};

/// One model loaded once, its tokenizer and chat template, and what every
/// benchmark does with it: compile span programs, make executors, run.
class ModelSession {
public:
  /// Loads the model for `device`: the CPU packs its weights, the CUDA
  /// backend uploads them itself when an executor is made.
  static llvm::Expected<std::unique_ptr<ModelSession>>
  load(llvm::StringRef modelPath, backend::Device device = backend::Device::Cpu,
       model::ModelOptions options = {});
  /// The model, device and GEMM choices of a benchmark's arguments.
  static llvm::Expected<std::unique_ptr<ModelSession>>
  load(const BenchArgs &args);

  /// A fresh executor (an empty KV cache) over the loaded model, on the
  /// session's device whatever `options.device` says.
  llvm::Expected<std::unique_ptr<sched::Executor>>
  makeExecutor(const sched::ExecutorOptions &options) const;
  /// The same, with the usual knobs: cache mode, relocation, capacity.
  llvm::Expected<std::unique_ptr<sched::Executor>>
  makeExecutor(kv::CacheMode cacheMode, kv::RelocationMode relocation,
               int64_t cacheTokens) const;

  /// .span text → plan through the default passes (compile options: --set,
  /// tree-reduce, passes to skip, ...). `name` picks the reader (.span,
  /// .json) and names the text in diagnostics.
  llvm::Expected<plan::Plan>
  compile(llvm::StringRef source, llvm::StringRef name = "bench.span",
          const codegen::CompileOptions &options = {}) const;
  /// .span text → plan through the default passes minus `skipPasses`.
  llvm::Expected<plan::Plan>
  compileSkipping(llvm::StringRef source,
                  llvm::ArrayRef<std::string> skipPasses) const;

  /// Runs `plan` to completion; an error when any call failed. `totals`,
  /// when given, accumulates the run's calls, tokens and wall time.
  llvm::Expected<std::vector<sched::CallOutcome>>
  run(sched::Executor &executor, const plan::Plan &plan,
      RunTotals *totals = nullptr) const;

  /// Runs `plan` and returns each query's answer (the text of its last
  /// result that is a call) by query name: the plan orders queries its own
  /// way, not as the source wrote them.
  llvm::Expected<std::map<std::string, std::string>>
  answers(sched::Executor &executor, const plan::Plan &plan,
          RunTotals *totals = nullptr) const;

  model::Model &model() const { return *loadedModel; }
  const model::Tokenizer &tokenizer() const { return *loadedTokenizer; }
  const model::ChatTemplate &chatTemplate() const { return *loadedTemplate; }
  /// "SmolLM2-135M-Instruct.Q4_1.gguf (30 layers, context 8192)".
  std::string describeModel() const;

private:
  ModelSession() = default;
  std::string path;
  backend::Device device = backend::Device::Cpu;
  std::unique_ptr<model::Model> loadedModel;
  std::unique_ptr<model::Tokenizer> loadedTokenizer;
  std::optional<model::ChatTemplate> loadedTemplate;
  std::unique_ptr<model::ChatTemplateEncoder> encoder;
};

/// A double-quoted .span string literal whose value is `text` (quotes,
/// backslashes and control characters escaped), for any text.
std::string spanLiteral(llvm::StringRef text);

/// printf into a std::string (llvm::formatv trips gcc 12's
/// -Wmaybe-uninitialized on integers under -Werror).
template <typename... Ts>
std::string printed(const char *format, const Ts &...values) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format(format, values...);
  return text;
}

/// "12.3×", or "—" when either side is missing.
std::string formatRatio(double numerator, double denominator);

/// " --quick -r 3 --set k=v ...": the options a result file was made with.
std::string commandLine(const BenchArgs &args);

/// Wilson score interval (95%) of `successes` out of `trials`: {low, high}.
std::pair<double, double> wilsonInterval(size_t successes, size_t trials);

/// Whether `needle` occurs in `haystack`, ignoring case.
bool containsIgnoringCase(llvm::StringRef haystack, llvm::StringRef needle);

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_MODELSESSION_H
