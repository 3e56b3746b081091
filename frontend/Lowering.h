//===- Lowering.h - Lower a .span parse tree to span IR -------------------===//
//
// Resolves params (with --set overrides typed by the param's literal), lets
// (inlined where they are used), file("...") (relative to the program's
// folder, read only where FrontendOptions::readPolicy allows: see
// support/FileAccess.h) and gen/chat/retrieve options, and builds one
// span.query per `query` decl. Every semantic error is reported at its location
// through the DiagnosticEngine, and lowering goes on so that all errors of a
// file are reported; the module is returned only when there were none.
//
// Blocks: a `{ ... }` expression and the input of `gen` are a span.cross of
// their children (the model input is ordered); the children of cross, plus
// and chat blocks are the op's operands; the body of a query or a repeat is
// its single expression, or a span.cross when it has several.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_LOWERING_H
#define SPANC_FRONTEND_LOWERING_H

#include "frontend/SpnlJson.h"
#include "frontend/SyntaxTree.h"
#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "support/FileAccess.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace spanc::frontend {

struct FrontendOptions {
  /// --set NAME=VALUE overrides, in command-line order.
  std::vector<std::pair<std::string, std::string>> paramOverrides;
  /// Where file("...") may read and how much. The default allows nothing:
  /// a caller grants the program's folder and the user's --allow-read
  /// folders (support::ReadPolicy::forProgram).
  support::ReadPolicy readPolicy;
  /// How spnl JSON is imported (its max_tokens default, augment's k).
  SpnlImportOptions spnl;
};

/// Lowers a syntax tree without syntax errors. Returns null after reporting
/// errors.
std::unique_ptr<ir::Module> lowerToIR(const SyntaxTree &tree,
                                      ir::DiagnosticEngine &diagnostics,
                                      const FrontendOptions &options);

/// Splits "NAME=VALUE" (for --set); false when there is no '=' or no name.
bool parseParamOverride(llvm::StringRef text,
                        std::pair<std::string, std::string> &result);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_LOWERING_H
