//===- Load.h - Read a .span, spnl .json or .ir file into span IR ---------===//
//
// The one entry point the tools use: picks the reader by the file's
// extension (.json: spnl JSON, .ir: textual IR, anything else: .span),
// reports every problem through the DiagnosticEngine, and verifies the
// result.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_LOAD_H
#define SPANC_FRONTEND_LOAD_H

#include "frontend/Lowering.h"
#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>

namespace spanc::frontend {

enum class InputKind { Span, SpnlJson, IR };

InputKind inputKindForPath(llvm::StringRef path);

/// Reads `path` ("-": standard input, read as .span) and returns verified IR,
/// or null after reporting errors (including an unreadable file).
/// --set overrides apply to .span programs only; for other inputs they are
/// an error.
std::unique_ptr<ir::Module> loadModule(llvm::StringRef path,
                                       ir::DiagnosticEngine &diagnostics,
                                       const FrontendOptions &options = {});

/// Like loadModule, for text already in memory (generated programs,
/// benchmarks, servers): `name` picks the reader by its extension and names
/// the buffer in diagnostics.
std::unique_ptr<ir::Module>
loadModuleFromBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer,
                     llvm::StringRef name, ir::DiagnosticEngine &diagnostics,
                     const FrontendOptions &options = {});

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_LOAD_H
