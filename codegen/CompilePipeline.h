//===- CompilePipeline.h - Source text → optimized IR → plan --------------===//
//
// The path every tool takes from a span program to model calls, in three
// stages: read the source (.span, spnl JSON or textual IR) into verified IR,
// optimize it (the default pass pipeline, or the one spanc opt is given),
// lower it to a plan through a MessageEncoder. The CLI runs the stages one
// by one, because it acts between them (a program's errors are reported
// before a model is opened, --emit=ir-opt stops after the second);
// compileToModule and compileToPlan run them in one call and return the
// diagnostics as text, for callers without a terminal (benchmarks, a
// server).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_CODEGEN_COMPILEPIPELINE_H
#define SPANC_CODEGEN_COMPILEPIPELINE_H

#include "codegen/Lowering.h"
#include "frontend/Lowering.h"
#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "ir/Printer.h"
#include "passes/PassManager.h"
#include "plan/Plan.h"
#include "support/FileAccess.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spanc::codegen {

struct CompileOptions {
  frontend::FrontendOptions frontend;
  passes::PassOptions passes;
  /// Passes of the default pipeline to leave out (--skip-pass).
  std::vector<std::string> skipPasses;
  /// Instead of the default pipeline, these passes in this order,
  /// comma-separated; "" runs none (spanc opt --passes).
  std::optional<std::string> pipeline;
  /// Verify the IR after every pass, which names the pass that broke it;
  /// false verifies once, after the last pass (cheaper on large programs).
  bool verifyEach = true;
  /// What the plan may hold (stage 3: lowerToPlan, compileToPlan).
  LoweringLimits limits;
  /// Print the IR to stderr after every pass, or after the passes named.
  bool printAfterAll = false;
  std::vector<std::string> printAfter;
  ir::PrintOptions printOptions;
  /// Print each pass's rewrite count to stderr after the pipeline.
  bool printStatistics = false;

  /// Where the program may read: file("...") in the frontend, corpora in
  /// desugar-retrieve (support/FileAccess.h). Both default to nothing.
  void setReadPolicy(const support::ReadPolicy &policy) {
    frontend.readPolicy = policy;
    passes.corpusIndex.readPolicy = policy;
  }
};

/// Stage 1: reads the program at `path` ("-": standard input, as .span;
/// the extension picks the reader) into verified IR, or returns null after
/// reporting its errors through `diagnostics`.
std::unique_ptr<ir::Module> loadSource(llvm::StringRef path,
                                       ir::DiagnosticEngine &diagnostics,
                                       const CompileOptions &options = {});

/// Stage 2: the pass pipeline the options ask for. It is built before any
/// input is read, so a bad pass name is reported before the program's
/// errors; the options must outlive it.
class Optimizer {
public:
  /// Fails, naming the registered passes, when the pipeline, a skipped
  /// pass or a pass to print after is unknown.
  static llvm::Expected<std::unique_ptr<Optimizer>>
  create(ir::DiagnosticEngine &diagnostics, const CompileOptions &options);

  /// Optimizes `module` in place. Fails when a pass fails or leaves
  /// ill-formed IR (the diagnostics say where).
  llvm::Error run(ir::Module &module) { return manager.run(module); }

private:
  Optimizer(ir::DiagnosticEngine &diagnostics, const CompileOptions &options)
      : context(diagnostics, options.passes), manager(context) {}

  passes::PassContext context;
  passes::PassManager manager;
};

// Stage 3 is lowerToPlan (Lowering.h).

/// Stages 1 and 2 on text in memory: `source`, named `name` (its extension
/// picks the reader: .json = spnl JSON, .ir = textual IR, otherwise .span),
/// as an optimized module. On failure the error holds every diagnostic,
/// each with its location.
llvm::Expected<std::unique_ptr<ir::Module>>
compileToModule(llvm::StringRef source, llvm::StringRef name,
                const CompileOptions &options = {});

/// All three stages on text in memory, errors as compileToModule's.
llvm::Expected<plan::Plan> compileToPlan(llvm::StringRef source,
                                         llvm::StringRef name,
                                         const MessageEncoder &encoder,
                                         const CompileOptions &options = {});

} // namespace spanc::codegen

#endif // SPANC_CODEGEN_COMPILEPIPELINE_H
