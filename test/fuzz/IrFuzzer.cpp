//===- IrFuzzer.cpp - libFuzzer target: textual IR parse, verify ----------===//
//
// The IR text is an input of its own (`spanc opt FILE.ir`, `spanc run
// FILE.ir`) that reaches ops and attribute combinations the .span and spnl
// JSON frontends never build (an empty span.plus, a seq inside a gen, a
// loc() naming any file), so it is fuzzed on its own.
//
//===----------------------------------------------------------------------===//

#include "ir/Parser.h"
#include "test/fuzz/FuzzCommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace spanc;
  return fuzz::runOne(data, size, "fuzz.ir",
                      [](unsigned bufferId, ir::DiagnosticEngine &diagnostics) {
                        return ir::parseModule(bufferId, diagnostics);
                      });
}
