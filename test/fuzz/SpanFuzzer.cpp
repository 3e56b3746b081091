//===- SpanFuzzer.cpp - libFuzzer target: .span parse, lower, verify ------===//

#include "frontend/Lowering.h"
#include "frontend/SyntaxTree.h"
#include "test/fuzz/FuzzCommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace spanc;
  return fuzz::runOne(data, size, "fuzz.span",
                      [](unsigned bufferId, ir::DiagnosticEngine &diagnostics) {
                        std::unique_ptr<ir::Module> module;
                        auto tree = frontend::SyntaxTree::parse(
                            diagnostics.getSourceMgr(), bufferId);
                        if (tree->numSyntaxErrors() == 0)
                          module = frontend::lowerToIR(*tree, diagnostics, {});
                        return module;
                      });
}
