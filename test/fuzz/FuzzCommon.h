//===- FuzzCommon.h - Shared driver of the frontend fuzz targets ----------===//
//
// Each target feeds its bytes to one reader, and whatever comes back
// verified goes through the printer, the IR parser (the text must parse
// back to the same module) and the default pipeline (without
// desugar-retrieve, which would create index files wherever the input
// points). Diagnostics are counted, not printed, to keep the fuzzer fast.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_FUZZ_FUZZCOMMON_H
#define SPANC_TEST_FUZZ_FUZZCOMMON_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/PassManager.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>
#include <functional>
#include <memory>

namespace spanc::fuzz {

using Reader = std::function<std::unique_ptr<ir::Module>(
    unsigned bufferId, ir::DiagnosticEngine &diagnostics)>;

inline void checkModule(ir::Module &module, ir::DiagnosticEngine &diagnostics) {
  // Round trip: what the printer writes, the parser reads back as equal.
  std::string text = ir::toString(module);
  llvm::SourceMgr roundTripSources;
  roundTripSources.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  ir::DiagnosticEngine roundTripDiagnostics(roundTripSources);
  std::unique_ptr<ir::Module> reparsed =
      ir::parseModuleString(text, "roundtrip.ir", roundTripDiagnostics);
  if (!reparsed || !ir::isStructurallyEqual(module, *reparsed)) {
    llvm::errs() << "round trip failed for:\n" << text;
    std::abort();
  }

  passes::PassOptions options;
  options.treeReduce = 2;
  passes::PassContext context(diagnostics, options);
  passes::PassManager manager(context);
  manager.addDefaultPipeline(); // desugar-retrieve is not linked in.
  if (llvm::Error error = manager.run(module)) {
    // Verified input must never make a pass fail or break the IR.
    llvm::errs() << "pipeline failed: " << llvm::toString(std::move(error))
                 << "\n"
                 << text;
    std::abort();
  }
  // And the pipeline is at its fixed point after one run.
  std::string once = ir::toString(module);
  if (llvm::Error error = manager.run(module)) {
    llvm::consumeError(std::move(error));
    std::abort();
  }
  if (ir::toString(module) != once) {
    llvm::errs() << "second pipeline run changed:\n" << once;
    std::abort();
  }
}

inline int runOne(const uint8_t *data, size_t size, const char *name,
                  const Reader &read) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  ir::DiagnosticEngine diagnostics(sourceMgr);
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), name);
  unsigned bufferId =
      sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  diagnostics.registerBuffer(name, bufferId);
  std::unique_ptr<ir::Module> module = read(bufferId, diagnostics);
  if (module && ir::verify(*module, diagnostics) &&
      diagnostics.getNumErrors() == 0)
    checkModule(*module, diagnostics);
  return 0;
}

} // namespace spanc::fuzz

#endif // SPANC_TEST_FUZZ_FUZZCOMMON_H
