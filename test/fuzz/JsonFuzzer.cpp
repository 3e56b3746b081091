//===- JsonFuzzer.cpp - libFuzzer target: spnl JSON import, verify --------===//

#include "frontend/SpnlJson.h"
#include "test/fuzz/FuzzCommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace spanc;
  return fuzz::runOne(data, size, "fuzz.json",
                      [](unsigned bufferId, ir::DiagnosticEngine &diagnostics) {
                        return frontend::importSpnlJson(bufferId, diagnostics);
                      });
}
