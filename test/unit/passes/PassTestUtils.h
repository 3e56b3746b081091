//===- PassTestUtils.h - Run passes over IR text in unit tests ------------===//
#ifndef SPANC_TEST_UNIT_PASSES_PASSTESTUTILS_H
#define SPANC_TEST_UNIT_PASSES_PASSTESTUTILS_H

#include "ir/Parser.h"
#include "ir/Printer.h"
#include "passes/PassManager.h"

#include "gtest/gtest.h"

#include "llvm/Support/SourceMgr.h"

#include <string>

namespace spanc::passes::testing {

/// The result of a pipeline run: the printed IR, or the diagnostics.
struct PassResult {
  bool ok = false;
  std::string ir;
  std::string diagnostics;
};

inline PassResult runPipeline(llvm::StringRef irText, llvm::StringRef pipeline,
                              const PassOptions &options = {},
                              llvm::StringRef fileName = "test.ir") {
  PassResult result;
  llvm::SourceMgr sourceMgr;
  llvm::raw_string_ostream diagnosticStream(result.diagnostics);
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *context) {
        diagnostic.print(nullptr, *static_cast<llvm::raw_ostream *>(context),
                         /*ShowColors=*/false);
      },
      &diagnosticStream);
  ir::DiagnosticEngine diagnostics(sourceMgr);
  std::unique_ptr<ir::Module> module =
      ir::parseModuleString(irText, fileName, diagnostics);
  if (!module) {
    ADD_FAILURE() << "cannot parse:\n"
                  << irText.str() << diagnosticStream.str();
    return result;
  }
  PassContext context(diagnostics, options);
  PassManager manager(context);
  if (pipeline == "<default>") {
    manager.addDefaultPipeline();
  } else if (llvm::Error error = manager.addPipeline(pipeline)) {
    ADD_FAILURE() << llvm::toString(std::move(error));
    return result;
  }
  if (llvm::Error error = manager.run(*module)) {
    diagnosticStream << llvm::toString(std::move(error)) << "\n";
    diagnosticStream.flush();
    return result;
  }
  diagnosticStream.flush();
  result.ok = true;
  result.ir = ir::toString(*module);
  return result;
}

/// `irText` parsed and printed again: the canonical text to compare with.
inline std::string canonical(llvm::StringRef irText) {
  PassResult result = runPipeline(irText, "");
  EXPECT_TRUE(result.ok) << result.diagnostics;
  return result.ir;
}

/// Runs `pipeline` over `input` and expects `expected` (both IR text).
#define EXPECT_REWRITES(pipeline, input, expected)                             \
  do {                                                                         \
    ::spanc::passes::testing::PassResult result_ =                             \
        ::spanc::passes::testing::runPipeline(input, pipeline);                \
    ASSERT_TRUE(result_.ok) << result_.diagnostics;                            \
    EXPECT_EQ(result_.ir, ::spanc::passes::testing::canonical(expected));      \
  } while (false)

} // namespace spanc::passes::testing

#endif // SPANC_TEST_UNIT_PASSES_PASSTESTUTILS_H
