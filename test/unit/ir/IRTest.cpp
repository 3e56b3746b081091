//===- IRTest.cpp - Ops, builder, printer, parser, verifier of span IR ----===//

#include "ir/IR.h"
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

using namespace spanc::ir;

namespace {

/// Parses `text`, collecting diagnostics into `messages`.
struct Harness {
  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diagnostics{sourceMgr};
  std::string messages;

  Harness() {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diagnostic, void *context) {
          std::string &out = *static_cast<std::string *>(context);
          llvm::raw_string_ostream os(out);
          diagnostic.print(nullptr, os, /*ShowColors=*/false);
        },
        &messages);
  }

  std::unique_ptr<Module> parse(llvm::StringRef text) {
    return parseModuleString(text, "test.ir", diagnostics);
  }
};

const char *kRag = R"(span.query @rag {
  %0 = span.system "Answer only from the documents."
  %1 = span.retrieve {corpus = "examples/corpus", k = 8} query "What does it do?"
  %2 = span.plus %1
  %3 = span.user "What does \"it\" do?\n"
  %4 = span.cross %0, %2, %3
  %5 = span.gen %4 {max_tokens = 128, temperature = 0.0}
  span.yield %5
}
)";

} // namespace

TEST(IR, BuilderOutputPrintsAsDesignText) {
  Module module;
  Query *query = module.addQuery("rag", {});
  Builder builder(query);
  Op *system = builder.createSystem("Answer only from the documents.");
  Op *retrieve =
      builder.createRetrieve("examples/corpus", 8, "What does it do?");
  Op *plus = builder.createPlus({retrieve});
  Op *user = builder.createUser("What does \"it\" do?\n");
  Op *cross = builder.createCross({system, plus, user});
  Op *gen = builder.createGen(
      cross, {{"temperature", Attribute(0.0)}, {"max_tokens", Attribute(128)}});
  builder.createYield(gen);
  EXPECT_EQ(toString(module), kRag);
  Harness harness;
  EXPECT_TRUE(verify(module, harness.diagnostics)) << harness.messages;
}

TEST(IR, ParsePrintRoundTripIsExact) {
  Harness harness;
  auto module = harness.parse(kRag);
  ASSERT_TRUE(module) << harness.messages;
  EXPECT_EQ(toString(*module), kRag);
  auto again = harness.parse(toString(*module));
  ASSERT_TRUE(again);
  EXPECT_TRUE(isStructurallyEqual(*module, *again));
}

TEST(IR, LocationsRoundTripWhenPrinted) {
  Harness harness;
  auto module = harness.parse(kRag);
  ASSERT_TRUE(module);
  const Op &retrieve = *std::next(module->getQueries()[0]->getOps().begin());
  EXPECT_EQ(retrieve.getLoc().file, "test.ir");
  EXPECT_EQ(retrieve.getLoc().line, 3u);
  EXPECT_EQ(retrieve.getLoc().column, 3u);
  PrintOptions withLocations;
  withLocations.printLocations = true;
  std::string text = toString(*module, withLocations);
  EXPECT_NE(text.find("loc(\"test.ir\":3:3)"), std::string::npos) << text;
  auto again = harness.parse(text);
  ASSERT_TRUE(again) << harness.messages;
  EXPECT_TRUE(isStructurallyEqual(*module, *again, /*compareLocations=*/true));
}

TEST(IR, StructuralEqualitySeesEveryDifference) {
  Harness harness;
  auto base = harness.parse(kRag);
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"k = 8", "k = 9"},
           {"temperature = 0.0", "temperature = 0"},
           {"%0, %2, %3", "%0, %3, %2"},
           {"span.plus", "span.cross"},
           {"\"Answer", "\"answer"},
           {"@rag", "@other"}}) {
    std::string text = kRag;
    text.replace(text.find(from), from.size(), to);
    auto changed = harness.parse(text);
    ASSERT_TRUE(changed) << text << harness.messages;
    EXPECT_FALSE(isStructurallyEqual(*base, *changed)) << from << " -> " << to;
  }
}

TEST(IR, ReplaceAllUsesAndEraseKeepUseListsRight) {
  Harness harness;
  auto module = harness.parse(kRag);
  Query &query = *module->getQueries()[0];
  auto it = query.getOps().begin();
  Op *system = &*it++;
  Op *retrieve = &*it++;
  Op *plus = &*it++;
  Op *user = &*it++;
  Op *cross = &*it++;
  EXPECT_TRUE(plus->hasOneUse());
  EXPECT_EQ(cross->getOperand(1), plus);
  // Unwrap the singleton plus: its users now read the retrieve directly.
  plus->replaceAllUsesWith(retrieve);
  EXPECT_TRUE(plus->useEmpty());
  EXPECT_EQ(retrieve->getNumUses(), 2u);
  plus->erase();
  EXPECT_TRUE(retrieve->hasOneUse());
  EXPECT_EQ(cross->getOperand(1), retrieve);
  // Insert before, and erase an operand slot.
  Builder builder;
  builder.setInsertionPoint(user);
  Op *fragment = builder.createFragment("doc", {{"offset", Attribute(3)}});
  cross->insertOperand(2, fragment);
  cross->eraseOperand(0);
  EXPECT_TRUE(system->useEmpty());
  system->erase();
  EXPECT_EQ(toString(*module), R"(span.query @rag {
  %0 = span.retrieve {corpus = "examples/corpus", k = 8} query "What does it do?"
  %1 = span.fragment "doc" {offset = 3}
  %2 = span.user "What does \"it\" do?\n"
  %3 = span.cross %0, %1, %2
  %4 = span.gen %3 {max_tokens = 128, temperature = 0.0}
  span.yield %4
}
)");
  EXPECT_TRUE(verify(*module, harness.diagnostics)) << harness.messages;
}

TEST(IR, OperandVectorsGrowWithoutBreakingUseLists) {
  Module module;
  Query *query = module.addQuery("q", {});
  Builder builder(query);
  Op *leaf = builder.createUser("x");
  Op *cross = builder.createCross({});
  for (int i = 0; i < 100; ++i)
    cross->appendOperand(leaf);
  EXPECT_EQ(leaf->getNumUses(), 100u);
  for (Use &use : leaf->uses())
    EXPECT_EQ(use.getOwner(), cross);
  for (int i = 0; i < 50; ++i)
    cross->eraseOperand(0);
  EXPECT_EQ(leaf->getNumUses(), 50u);
  cross->dropAllOperands();
  EXPECT_TRUE(leaf->useEmpty());
}

TEST(IR, VerifierReportsEveryProblemAtItsLocation) {
  Harness harness;
  auto module = harness.parse(R"(span.query @q {
  %0 = span.user "a"
  %1 = span.gen %0, %0 {temperature = 3.5, bogus = 1}
  %2 = span.retrieve {k = "eight"} query "x"
  %3 = span.cross %4
  %4 = span.repeat %0 {n = 0}
}
)");
  ASSERT_TRUE(module) << harness.messages;
  EXPECT_FALSE(verify(*module, harness.diagnostics));
  const std::string &m = harness.messages;
  EXPECT_NE(m.find("test.ir:3:3: error: 'span.gen' takes 1 operand, got 2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("attribute 'temperature' of 'span.gen' must be in [0, 2], "
                   "got 3.5"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("unknown attribute 'bogus'"), std::string::npos) << m;
  EXPECT_NE(m.find("test.ir:4:3: error: attribute 'k' of 'span.retrieve' "
                   "takes an integer, not a string"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("'span.retrieve' needs attribute 'corpus'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("test.ir:5:3: error: 'span.cross' operand #0 (%4) is used "
                   "before it is defined"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("attribute 'n' of 'span.repeat' must be at least 1, got 0"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("test.ir:1:1: error: query '@q' has no span.yield"),
            std::string::npos)
      << m;
}

TEST(IR, ParserReportsLocatedSyntaxErrors) {
  Harness harness;
  EXPECT_FALSE(harness.parse("span.query @q {\n  %0 = span.nope\n}\n"));
  EXPECT_NE(harness.messages.find("test.ir:2:8: error: unknown op 'span.nope'"),
            std::string::npos)
      << harness.messages;
  harness.messages.clear();
  EXPECT_FALSE(harness.parse(
      "span.query @q {\n  %0 = span.user \"a\"\n  span.yield %9\n}\n"));
  EXPECT_NE(
      harness.messages.find("test.ir:3:14: error: use of undefined value '%9'"),
      std::string::npos)
      << harness.messages;
}

TEST(IR, FloatsPrintShortestAndRoundTrip) {
  for (double value : {0.0, 0.7, 1.0 / 3.0, 2.0, 1e-300, 123456789.125}) {
    std::string text;
    llvm::raw_string_ostream os(text);
    printFloat(value, os);
    os.flush();
    EXPECT_TRUE(text.find_first_of(".e") != std::string::npos) << text;
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), value) << text;
  }
}

TEST(IR, HundredThousandOpsPrintParseAndVerify) {
  // A wide plus of 50 000 generates round-trips and verifies. How fast is
  // the compile benchmark's business (bench/compile), not a test's: timed
  // assertions fail on a loaded machine or under sanitizers.
  Module module;
  Query *query = module.addQuery("wide", {});
  Builder builder(query);
  llvm::SmallVector<Op *, 0> gens;
  for (int i = 0; i < 50000; ++i)
    gens.push_back(builder.createGen(builder.createUser("u")));
  builder.createYield(builder.createPlus(gens));
  std::string text = toString(module);
  Harness harness;
  auto parsed = harness.parse(text);
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(verify(*parsed, harness.diagnostics));
  EXPECT_TRUE(isStructurallyEqual(module, *parsed));
  EXPECT_EQ(parsed->countOps(), 100002u);
}

TEST(IR, UsesAcrossQueriesAreReportedAndTornDownSafely) {
  // A buggy pass could leave an operand pointing into another query: the
  // verifier says so, and destroying the module in any order is safe.
  auto module = std::make_unique<Module>();
  Query *first = module->addQuery("first", {});
  Query *second = module->addQuery("second", {});
  Builder builder(first);
  Op *shared = builder.createUser("shared");
  builder.createYield(shared);
  builder.setInsertionPointToEnd(second);
  builder.createYield(builder.createCross({shared}));
  Harness harness;
  EXPECT_FALSE(verify(*module, harness.diagnostics));
  EXPECT_NE(harness.messages.find("operand #0 is defined outside query "
                                  "'@second'"),
            std::string::npos)
      << harness.messages;
  module->takeQuery(0).reset(); // the defining query goes first
  EXPECT_EQ(second->getOps().front().getOperand(0), nullptr);
}

TEST(IR, VerifierBoundsHowDeepOpsNest) {
  // A chain of crosses, each over the one before: the chain of
  // kMaxNestingDepth ops (the yield included) verifies, one op more is
  // reported once, at the first op past the bound.
  auto chain = [](unsigned depth) {
    std::string text = "span.query @deep {\n  %0 = span.user \"x\"\n";
    for (unsigned i = 1; i + 1 < depth; ++i)
      text += "  %" + std::to_string(i) + " = span.cross %" +
              std::to_string(i - 1) + "\n";
    text += "  span.yield %" + std::to_string(depth - 2) + "\n}\n";
    return text;
  };
  Harness atBound;
  auto module = atBound.parse(chain(kMaxNestingDepth));
  ASSERT_TRUE(module) << atBound.messages;
  EXPECT_TRUE(verify(*module, atBound.diagnostics)) << atBound.messages;

  Harness past;
  module = past.parse(chain(kMaxNestingDepth + 5));
  ASSERT_TRUE(module) << past.messages;
  EXPECT_FALSE(verify(*module, past.diagnostics));
  // Line 1 is the query, line 2 the leaf: op number kMaxNestingDepth (the
  // first past the bound) is on line kMaxNestingDepth + 2.
  std::string expected = "test.ir:" + std::to_string(kMaxNestingDepth + 2) +
                         ":3: error: 'span.cross' is nested more than " +
                         std::to_string(kMaxNestingDepth) + " levels deep";
  EXPECT_NE(past.messages.find(expected), std::string::npos) << past.messages;
  EXPECT_EQ(past.diagnostics.getNumErrors(), 1u) << past.messages;
}

TEST(IR, LocationsCountLinesAndBytesInEveryLineEnding) {
  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diagnostics(sourceMgr);
  const char *text = "ab\ncd\r\nef\n\ng";
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "t.txt"), llvm::SMLoc());
  const char *start = sourceMgr.getMemoryBuffer(id)->getBufferStart();
  auto at = [&](size_t offset) {
    Location loc =
        diagnostics.getLocation(llvm::SMLoc::getFromPointer(start + offset));
    return std::to_string(loc.line) + ":" + std::to_string(loc.column);
  };
  EXPECT_EQ(at(0), "1:1");
  EXPECT_EQ(at(1), "1:2");
  EXPECT_EQ(at(2), "1:3"); // the newline ends its own line
  EXPECT_EQ(at(3), "2:1");
  EXPECT_EQ(at(5), "2:3"); // '\r' of "\r\n"
  EXPECT_EQ(at(7), "3:1");
  EXPECT_EQ(at(10), "4:1"); // an empty line
  EXPECT_EQ(at(11), "5:1"); // the last line, without a newline
  EXPECT_EQ(at(12), "5:2"); // one past the end
  EXPECT_EQ(at(6), "2:4");  // '\n' of "\r\n"
  // What SourceMgr itself says, for every offset but the one after a '\r'
  // (SourceMgr restarts its column count there, not only after '\n').
  for (size_t offset = 0; offset <= std::strlen(text); ++offset) {
    if (offset > 0 && text[offset - 1] == '\r')
      continue;
    auto [line, column] = sourceMgr.getLineAndColumn(
        llvm::SMLoc::getFromPointer(start + offset), id);
    EXPECT_EQ(at(offset), std::to_string(line) + ":" + std::to_string(column))
        << offset;
  }
}
