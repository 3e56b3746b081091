//===- CompilePipeline.cpp - Source text → optimized IR → plan ------------===//

#include "codegen/CompilePipeline.h"

#include "frontend/Load.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::codegen {

std::unique_ptr<ir::Module> loadSource(llvm::StringRef path,
                                       ir::DiagnosticEngine &diagnostics,
                                       const CompileOptions &options) {
  // Locations in the program (a .ir file's loc(...)) show their source
  // line only where the program may read.
  diagnostics.setSourceReadPolicy(options.frontend.readPolicy);
  return frontend::loadModule(path, diagnostics, options.frontend);
}

llvm::Expected<std::unique_ptr<Optimizer>>
Optimizer::create(ir::DiagnosticEngine &diagnostics,
                  const CompileOptions &options) {
  std::unique_ptr<Optimizer> optimizer(new Optimizer(diagnostics, options));
  passes::PassManager &manager = optimizer->manager;
  if (options.pipeline) {
    if (llvm::Error error = manager.addPipeline(*options.pipeline))
      return error;
  } else {
    for (const std::string &name : options.skipPasses)
      if (!passes::lookupPass(name))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "--skip-pass: no pass named '%s' (see 'spanc opt --help')",
            name.c_str());
    manager.addDefaultPipeline(options.skipPasses);
  }
  manager.setVerifyEach(options.verifyEach);
  manager.setPrintAfterAll(options.printAfterAll);
  for (const std::string &name : options.printAfter)
    if (llvm::Error error = manager.addPrintAfter(name))
      return error;
  manager.setPrintOptions(options.printOptions);
  manager.setPrintStatistics(options.printStatistics);
  return optimizer;
}

namespace {

/// Diagnostics collected as text, for the in-memory entry points.
class CollectedDiagnostics {
public:
  CollectedDiagnostics() : diagnostics(sourceMgr) {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diagnostic, void *context) {
          llvm::raw_string_ostream out(*static_cast<std::string *>(context));
          diagnostic.print(nullptr, out, /*ShowColors=*/false);
        },
        &messages);
  }

  ir::DiagnosticEngine &engine() { return diagnostics; }

  /// Every message so far, then `error`'s (when it says more), as one error.
  llvm::Error failure(llvm::StringRef stage,
                      llvm::Error error = llvm::Error::success()) {
    if (error) {
      if (!messages.empty())
        messages += "\n";
      messages += llvm::toString(std::move(error));
    }
    if (messages.empty())
      messages = (stage + " failed without a diagnostic").str();
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                   messages.c_str());
  }

private:
  std::string messages;
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics;
};

llvm::Expected<std::unique_ptr<ir::Module>>
optimizeSource(llvm::StringRef source, llvm::StringRef name,
               const CompileOptions &options, CollectedDiagnostics &collected) {
  collected.engine().setSourceReadPolicy(options.frontend.readPolicy);
  std::unique_ptr<ir::Module> module = frontend::loadModuleFromBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, name), name,
      collected.engine(), options.frontend);
  if (!module)
    return collected.failure("parsing");
  auto optimizer = Optimizer::create(collected.engine(), options);
  if (!optimizer)
    return collected.failure("the pass pipeline", optimizer.takeError());
  if (llvm::Error error = (*optimizer)->run(*module))
    return collected.failure("the pass pipeline", std::move(error));
  return module;
}

} // namespace

llvm::Expected<std::unique_ptr<ir::Module>>
compileToModule(llvm::StringRef source, llvm::StringRef name,
                const CompileOptions &options) {
  CollectedDiagnostics collected;
  return optimizeSource(source, name, options, collected);
}

llvm::Expected<plan::Plan> compileToPlan(llvm::StringRef source,
                                         llvm::StringRef name,
                                         const MessageEncoder &encoder,
                                         const CompileOptions &options) {
  CollectedDiagnostics collected;
  auto module = optimizeSource(source, name, options, collected);
  if (!module)
    return module.takeError();
  std::optional<plan::Plan> plan =
      lowerToPlan(**module, encoder, collected.engine(), options.limits);
  if (!plan)
    return collected.failure("lowering");
  return std::move(*plan);
}

} // namespace spanc::codegen
