//===- CompilePipeline.h - Source text → optimized IR → plan, in one call -===//
//
// The path every tool takes from a span program to model calls: parse
// (.span, spnl JSON or textual IR), verify, run the default pass pipeline,
// lower through a MessageEncoder. Diagnostics are collected as text so that
// callers without a terminal (benchmarks, the server) can return them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_CODEGEN_COMPILEPIPELINE_H
#define SPANC_CODEGEN_COMPILEPIPELINE_H

#include "codegen/Lowering.h"
#include "frontend/Lowering.h"
#include "passes/PassManager.h"
#include "plan/Plan.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace spanc::codegen {

struct CompileOptions {
  frontend::FrontendOptions frontend;
  passes::PassOptions passes;
  /// Passes of the default pipeline to leave out (--skip-pass).
  std::vector<std::string> skipPasses;
};

/// Compiles `source`, named `name` (its extension picks the reader:
/// .json = spnl JSON, .ir = textual IR, otherwise .span). On failure the
/// error holds every diagnostic, each with its location.
llvm::Expected<plan::Plan> compileToPlan(llvm::StringRef source,
                                         llvm::StringRef name,
                                         const MessageEncoder &encoder,
                                         const CompileOptions &options = {});

} // namespace spanc::codegen

#endif // SPANC_CODEGEN_COMPILEPIPELINE_H
