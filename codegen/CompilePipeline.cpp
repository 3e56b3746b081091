//===- CompilePipeline.cpp - Source text → optimized IR → plan -----------===//

#include "codegen/CompilePipeline.h"

#include "frontend/Load.h"
#include "ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::codegen {

llvm::Expected<plan::Plan> compileToPlan(llvm::StringRef source,
                                         llvm::StringRef name,
                                         const MessageEncoder &encoder,
                                         const CompileOptions &options) {
  std::string messages;
  llvm::SourceMgr sourceMgr;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *context) {
        llvm::raw_string_ostream out(*static_cast<std::string *>(context));
        diagnostic.print(nullptr, out, /*ShowColors=*/false);
      },
      &messages);
  ir::DiagnosticEngine diagnostics(sourceMgr);
  auto failure = [&](llvm::StringRef stage) {
    if (messages.empty())
      messages = (stage + " failed without a diagnostic").str();
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                   messages.c_str());
  };

  std::unique_ptr<ir::Module> module = frontend::loadModuleFromBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, name), name, diagnostics,
      options.frontend);
  if (!module)
    return failure("parsing");
  passes::PassContext context(diagnostics, options.passes);
  passes::PassManager manager(context);
  manager.addDefaultPipeline(options.skipPasses);
  if (llvm::Error error = manager.run(*module)) {
    if (!messages.empty())
      messages += "\n";
    messages += llvm::toString(std::move(error));
    return failure("the pass pipeline");
  }
  std::optional<plan::Plan> plan = lowerToPlan(*module, encoder, diagnostics);
  if (!plan)
    return failure("lowering");
  return std::move(*plan);
}

} // namespace spanc::codegen
