//===- Load.cpp - Read a .span, spnl .json or .ir file into span IR -------===//

#include "frontend/Load.h"

#include "frontend/SpnlJson.h"
#include "frontend/SyntaxTree.h"
#include "ir/Parser.h"
#include "ir/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

namespace spanc::frontend {

InputKind inputKindForPath(llvm::StringRef path) {
  llvm::StringRef extension = llvm::sys::path::extension(path);
  if (extension.equals_insensitive(".json"))
    return InputKind::SpnlJson;
  if (extension.equals_insensitive(".ir"))
    return InputKind::IR;
  return InputKind::Span;
}

std::unique_ptr<ir::Module> loadModule(llvm::StringRef path,
                                       ir::DiagnosticEngine &diagnostics,
                                       const FrontendOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer) {
    diagnostics.error(ir::Location(), "cannot read '" + path +
                                          "': " + buffer.getError().message());
    return nullptr;
  }
  return loadModuleFromBuffer(std::move(*buffer), path, diagnostics, options);
}

std::unique_ptr<ir::Module>
loadModuleFromBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer,
                     llvm::StringRef path, ir::DiagnosticEngine &diagnostics,
                     const FrontendOptions &options) {
  // A UTF-8 byte order mark is no part of the program, whatever its kind
  // (spnl JSON always took one): left out of the buffer, so columns on the
  // first line count from the first character.
  llvm::StringRef bom = "\xEF\xBB\xBF";
  if (buffer->getBuffer().startswith(bom))
    buffer = llvm::MemoryBuffer::getMemBufferCopy(
        buffer->getBuffer().drop_front(bom.size()),
        buffer->getBufferIdentifier());
  llvm::SourceMgr &sourceMgr = diagnostics.getSourceMgr();
  unsigned bufferId =
      sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  diagnostics.registerBuffer(path, bufferId);

  InputKind kind = inputKindForPath(path);
  if (kind != InputKind::Span && !options.paramOverrides.empty()) {
    diagnostics.error(ir::Location(), "--set applies to .span programs; '" +
                                          path + "' has no params");
    return nullptr;
  }
  std::unique_ptr<ir::Module> module;
  switch (kind) {
  case InputKind::Span: {
    auto tree = SyntaxTree::parse(sourceMgr, bufferId);
    if (tree->numSyntaxErrors())
      return nullptr;
    module = lowerToIR(*tree, diagnostics, options);
    break;
  }
  case InputKind::SpnlJson:
    module = importSpnlJson(bufferId, diagnostics, options.spnl);
    break;
  case InputKind::IR:
    module = ir::parseModule(bufferId, diagnostics);
    break;
  }
  if (!module || !ir::verify(*module, diagnostics))
    return nullptr;
  return module;
}

} // namespace spanc::frontend
