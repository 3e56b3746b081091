//===- SpanRobustnessTest.cpp - Mutated programs never crash the frontend -===//
//
// Applies random mutations to .span and spnl JSON programs and checks that
// the frontend never crashes or hangs: it either reports errors or returns
// IR that verifies and round-trips through the text form. Deterministic;
// under --config=asan it is a small fuzzer (test/fuzz/ has the long runs).
//
//===----------------------------------------------------------------------===//

#include "frontend/Lowering.h"
#include "frontend/SpnlJson.h"
#include "frontend/SyntaxTree.h"
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <random>

using namespace spanc;

namespace {

const char *kSpanSeed = R"(param question = "What does the pool do?"
param n = 3
let rules = """Answer only
from the documents."""
let intro = { system rules user "Hi\tthere\n" }
query rag {
  gen(max_tokens = 128, temperature = 0) {
    system rules
    plus { retrieve(corpus = "c", query = question, k = 2) }
    user question
  }
}
query judge {
  chat(max_tokens = 32, reduce = 2, top_p = 0.5, seed = -1) {
    intro
    plus { repeat(n) { gen(temperature = 0.7) { user "write" } } }
    cross { fragment "a" fragment "b \u00e9" }
    assistant "ok"  # done
  }
}
)";

const char *kJsonSeed =
    R"({"g": {"model": "m", "max_tokens": 5, "input": {"cross": [
  {"system": "s"}, {"plus": [{"repeat": {"n": 2, "query": {"g": {"input":
  {"user": "u"}, "temperature": 0.5}}}}, {"map": {"metadata": {"model": "m"},
  "inputs": ["a", "b"]}}]}, {"print": "p"}, {"seq": [{"monad": {"user": "x"}},
  {"par": [{"assistant": "y"}]}]}]}}})";

const char kSpanBits[] = "{}()=,\"#\\\n -.0123456789eE_ query param let gen "
                         "chat plus cross repeat retrieve user file x n";
const char kJsonBits[] = "{}[]:,\"\\ -.0123456789eE g input plus map n query";

std::string mutate(std::string text, std::mt19937 &random, const char *bits,
                   size_t numBits) {
  int edits = 1 + random() % 4;
  for (int e = 0; e < edits && !text.empty(); ++e) {
    size_t at = random() % text.size();
    switch (random() % 5) {
    case 0:
      text[at] = static_cast<char>(random() % 256);
      break;
    case 1:
      text.insert(at, 1, bits[random() % numBits]);
      break;
    case 2:
      text.erase(at, 1 + random() % 8);
      break;
    case 3:
      text.resize(at);
      break;
    default:
      text.insert(at, text.substr(random() % text.size(), random() % 60));
      break;
    }
  }
  return text;
}

void expectRoundTrip(const ir::Module &module, const std::string &input) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  ir::DiagnosticEngine diagnostics(sourceMgr);
  ASSERT_TRUE(ir::verify(module, diagnostics)) << input;
  auto again =
      ir::parseModuleString(ir::toString(module), "again.ir", diagnostics);
  ASSERT_TRUE(again) << input;
  EXPECT_TRUE(ir::isStructurallyEqual(module, *again)) << input;
}

} // namespace

TEST(FrontendRobustness, MutatedSpanProgramsGiveErrorsOrValidIR) {
  std::mt19937 random(7);
  unsigned accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text =
        mutate(kSpanSeed, random, kSpanBits, sizeof(kSpanBits) - 1);
    llvm::SourceMgr sourceMgr;
    sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
    ir::DiagnosticEngine diagnostics(sourceMgr);
    unsigned id = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, "mutated.span"),
        llvm::SMLoc());
    diagnostics.registerBuffer("mutated.span", id);
    auto tree = frontend::SyntaxTree::parse(sourceMgr, id);
    if (tree->numSyntaxErrors())
      continue;
    auto module = frontend::lowerToIR(*tree, diagnostics, {});
    if (!module)
      continue;
    ++accepted;
    expectRoundTrip(*module, text);
    if (HasFailure())
      break;
  }
  EXPECT_GT(accepted, 100u);
}

TEST(FrontendRobustness, MutatedSpnlJsonGivesErrorsOrValidIR) {
  std::mt19937 random(11);
  unsigned accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text =
        mutate(kJsonSeed, random, kJsonBits, sizeof(kJsonBits) - 1);
    llvm::SourceMgr sourceMgr;
    sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
    ir::DiagnosticEngine diagnostics(sourceMgr);
    unsigned id = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, "mutated.json"),
        llvm::SMLoc());
    auto module = frontend::importSpnlJson(id, diagnostics);
    if (!module)
      continue;
    ++accepted;
    expectRoundTrip(*module, text);
    if (HasFailure())
      break;
  }
  // JSON is strict: few mutations stay valid (41 with this seed), but
  // those exercise the accepting paths.
  EXPECT_GT(accepted, 20u);
}
