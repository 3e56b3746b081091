//===- ParserRobustnessTest.cpp - Mutated IR never crashes the reader -----===//
//
// Takes well-formed IR texts, applies many random mutations (byte changes,
// insertions of the characters the lexer turns on, deletions, truncations)
// and checks that parsing and verifying never crash or hang, and that
// whatever parses and verifies also round-trips exactly. Run under
// --config=asan this is a small, deterministic fuzzer for the IR reader.
//
//===----------------------------------------------------------------------===//

#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <random>

using namespace spanc::ir;

namespace {

const char *kSeeds[] = {
    R"(span.query @rag {
  %0 = span.system "Answer only from the documents."
  %1 = span.retrieve {corpus = "c", k = 8} query "What \"does\" it do?\n"
  %2 = span.plus %1
  %3 = span.user "q" loc("a.span":3:5)
  %4 = span.cross %0, %2, %3
  %5 = span.gen %4 {max_tokens = 128, temperature = 0.0, seed = -3}
  span.yield %5
}
)",
    R"(span.query @"a b" loc("x.span":1:1) {
  %a = span.fragment "f" {file = "d.md", offset = 12, score = 1.5e-3}
  %b = span.repeat %a {n = 4}
  %c = span.chat %a, %b {model = "m", stop = "\u0001"}
  %d = span.monad %c
  %e = span.seq %d, %c
  %f = span.par
  span.yield %e
}

span.query @second {
  %0 = span.assistant ""
  span.yield %0
}
)",
};

const char kInteresting[] = "%@\"\\{}(),=:.-+0123456789eE\n span.yield "
                            "loc query gen cross plus";

} // namespace

TEST(IRParser, SurvivesRandomMutationsAndRoundTripsWhatItAccepts) {
  std::mt19937 random(20261129);
  unsigned accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string text = kSeeds[iteration % 2];
    int edits = 1 + random() % 4;
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t at = random() % text.size();
      switch (random() % 5) {
      case 0:
        text[at] = static_cast<char>(random() % 256);
        break;
      case 1:
        text.insert(at, 1, kInteresting[random() % (sizeof(kInteresting) - 1)]);
        break;
      case 2:
        text.erase(at, 1 + random() % 8);
        break;
      case 3:
        text.resize(at);
        break;
      default:
        // Duplicate a slice: repeated names, ops and queries.
        text.insert(at, text.substr(random() % text.size(), random() % 40));
        break;
      }
    }
    llvm::SourceMgr sourceMgr;
    sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
    DiagnosticEngine diagnostics(sourceMgr);
    auto module = parseModuleString(text, "mutated.ir", diagnostics);
    if (!module || !verify(*module, diagnostics))
      continue;
    ++accepted;
    PrintOptions withLocations;
    withLocations.printLocations = true;
    auto again = parseModuleString(toString(*module, withLocations), "again.ir",
                                   diagnostics);
    ASSERT_TRUE(again) << text;
    ASSERT_TRUE(isStructurallyEqual(*module, *again, true)) << text;
  }
  // Some mutations keep the text valid (e.g. a changed string byte); if
  // none did, the mutator would not be exercising the accepting paths.
  EXPECT_GT(accepted, 100u);
}
