//===- QueryRunner.h - A model loaded once, span programs run on it -------===//
//
// What the quality benchmarks (needle, accuracy) share: load the GGUF
// model, its tokenizer and chat template once, compile generated .span
// programs with compileToPlan, and run every query of a plan in one
// executor run — so the scheduler batches their decoding — reading back
// each query's answer.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_QUERYRUNNER_H
#define SPANC_BENCH_COMMON_QUERYRUNNER_H

#include "codegen/ChatTemplateEncoder.h"
#include "codegen/CompilePipeline.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace spanc::bench {

/// Totals over one executor run, for the report.
struct RunTotals {
  size_t calls = 0;
  uint64_t promptTokens = 0, computedTokens = 0, reusedTokens = 0,
           generatedTokens = 0;
  double seconds = 0;
  RunTotals &operator+=(const RunTotals &other);
};

class QueryRunner {
public:
  static llvm::Expected<std::unique_ptr<QueryRunner>>
  load(llvm::StringRef modelPath);

  const model::Tokenizer &tokenizer() const { return *tokenizerPtr; }
  /// "SmolLM2-135M-Instruct.Q4_1.gguf (30 layers, context 8192)".
  std::string describeModel() const;

  /// A new executor (its own KV cache) over the loaded model.
  llvm::Expected<std::unique_ptr<sched::Executor>>
  makeExecutor(const sched::ExecutorOptions &options) const;

  llvm::Expected<codegen::Plan>
  compile(llvm::StringRef source, llvm::StringRef name,
          const codegen::CompileOptions &options = {}) const;

  /// Runs `plan` on `executor` in one run and returns each query's answer
  /// (the text of its last result that is a call) by query name: the plan
  /// orders queries its own way, not as the source wrote them. Any failed
  /// call fails the whole run, naming it.
  llvm::Expected<std::map<std::string, std::string>>
  run(sched::Executor &executor, const codegen::Plan &plan,
      RunTotals *totals = nullptr) const;

private:
  QueryRunner() = default;
  std::string modelPath;
  std::unique_ptr<model::Model> modelPtr;
  std::unique_ptr<model::Tokenizer> tokenizerPtr;
  std::unique_ptr<model::ChatTemplate> chatTemplatePtr;
  std::unique_ptr<codegen::ChatTemplateEncoder> encoderPtr;
};

/// Wilson score interval (95%) of `successes` out of `trials`: {low, high}.
std::pair<double, double> wilsonInterval(size_t successes, size_t trials);

/// Whether `needle` occurs in `haystack`, ignoring case.
bool containsIgnoringCase(llvm::StringRef haystack, llvm::StringRef needle);

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_QUERYRUNNER_H
