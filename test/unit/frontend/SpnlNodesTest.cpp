//===- SpnlNodesTest.cpp - spnl's seq, zip, augment, bulk and max_tokens --===//

#include "frontend/SpnlJson.h"
#include "ir/Diagnostics.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace spanc;

namespace {

/// Imports one JSON text; `ir` is its printed IR (empty on failure) and
/// `messages` every diagnostic.
struct Imported {
  std::string ir;
  std::string messages;
};

Imported import(const std::string &text,
                const frontend::SpnlImportOptions &options = {}) {
  Imported result;
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *out) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(out));
        diagnostic.print(nullptr, os, /*ShowColors=*/false);
      },
      &result.messages);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "q.json"), llvm::SMLoc());
  auto module = frontend::importSpnlJson(id, diagnostics, options);
  if (module && ir::verify(*module, diagnostics))
    result.ir = ir::toString(*module);
  return result;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST(SpnlNodes, SeqInAGenInputIsACrossAndOrdersExecutionElsewhere) {
  Imported inside =
      import(R"({"g": {"model": "m", "input": {"seq": [{"system": "s"},
                 {"plus": [{"user": "a"}]}, {"user": "q"}]}}})");
  EXPECT_TRUE(contains(inside.ir, "span.cross %0, %2, %3")) << inside.ir;
  EXPECT_FALSE(contains(inside.ir, "span.seq")) << inside.ir;

  // Nested deeper in the input (a plus of a seq) it is still the input.
  Imported nested = import(R"({"g": {"model": "m", "input": {"plus": [
                 {"seq": [{"user": "a"}, {"user": "b"}]}]}}})");
  EXPECT_TRUE(contains(nested.ir, "span.cross %0, %1")) << nested.ir;

  Imported outside = import(R"({"seq": [{"g": {"model": "m",
                 "input": {"user": "a"}}}, {"user": "b"}]})");
  EXPECT_TRUE(contains(outside.ir, "span.seq %1, %2")) << outside.ir;
}

TEST(SpnlNodes, ZipPutsFirstBeforeEachElementOfSecondInSecondsJoin) {
  Imported list = import(
      R"({"zip": {"first": {"user": "a"}, "second": {"par": [{"user": "b"},
          {"user": "c"}]}}})");
  EXPECT_TRUE(contains(list.ir, "span.par %0, %1, %0, %2")) << list.ir;

  // A message second is one element, in order.
  Imported single =
      import(R"({"zip": {"first": {"user": "a"}, "second": {"user": "b"}}})");
  EXPECT_TRUE(contains(single.ir, "span.seq %0, %1")) << single.ir;

  // A plus first joins each element to its spans.
  Imported plus = import(
      R"({"zip": {"first": {"plus": [{"user": "d1"}, {"user": "d2"}]},
          "second": {"cross": [{"user": "q1"}, {"user": "q2"}]}}})");
  EXPECT_TRUE(contains(plus.ir, "%4 = span.plus %0, %1, %2")) << plus.ir;
  EXPECT_TRUE(contains(plus.ir, "%5 = span.plus %0, %1, %3")) << plus.ir;
  EXPECT_TRUE(contains(plus.ir, "%6 = span.cross %4, %5")) << plus.ir;
}

TEST(SpnlNodes, AugmentRetrievesFromTheNamedCorpusForItsBodysText) {
  Imported augment = import(R"({"augment": {"embedding_model": "e",
      "body": {"cross": [{"user": "block pool"}, {"user": "eviction"}]},
      "doc": ["docs", {"Text": "inline"}]}})");
  EXPECT_TRUE(contains(augment.ir,
                       "span.retrieve {corpus = \"docs\", k = 4} query "
                       "\"block pool\\neviction\""))
      << augment.ir;
  EXPECT_TRUE(contains(augment.ir, "span.plus %0")) << augment.ir;

  frontend::SpnlImportOptions options;
  options.augmentK = 2;
  Imported named = import(
      R"({"augment": {"embedding_model": "e", "body": {"user": "x"},
          "doc": "docs"}})",
      options);
  EXPECT_TRUE(contains(named.ir, "{corpus = \"docs\", k = 2}")) << named.ir;
}

TEST(SpnlNodes, BulkFormsAreRepeatsAndMaps) {
  const char *generate =
      R"({"n": 2, "generate": {"model": "m", "input": {"user": "hi"}}})";
  for (const std::string &text :
       {std::string("{\"Repeat\": ") + generate + "}",
        std::string("{\"bulk\": {\"repeat\": ") + generate + "}}",
        std::string("{\"bulk\": {\"Repeat\": ") + generate + "}}",
        std::string("{\"bulk\": ") + generate + "}"}) {
    Imported repeat = import(text);
    EXPECT_TRUE(contains(repeat.ir, "span.repeat %1 {n = 2}"))
        << text << "\n"
        << repeat.ir << repeat.messages;
  }
  Imported map = import(R"({"bulk": {"Map": {"metadata": {"model": "m"},
      "inputs": ["a", "b"]}}})");
  EXPECT_TRUE(contains(map.ir, "span.plus %1, %3")) << map.ir;
}

TEST(SpnlNodes, MaxTokensZeroIsLeftOutAsWhenAbsent) {
  // spnl's 0 is "as many as the server allows": the compiler's default.
  for (const char *text :
       {R"({"g": {"model": "m", "input": {"user": "a"}, "max_tokens": 0}})",
        R"({"g": {"model": "m", "input": {"user": "a"}}})"})
    EXPECT_FALSE(contains(import(text).ir, "max_tokens")) << text;
  // A max_tokens given is kept.
  EXPECT_TRUE(contains(
      import(
          R"({"g": {"model": "m", "input": {"user": "a"}, "max_tokens": 7}})")
          .ir,
      "max_tokens = 7"));
}

TEST(SpnlNodes, MalformedNodesAreErrorsAtTheirLocationWithTheirPath) {
  struct Case {
    const char *json;
    const char *message;
  };
  const Case cases[] = {
      {R"({"zip": {"first": {"user": "a"}}})",
       "q.json:1:1: error: 'zip' needs 'second' (at /zip)"},
      {R"({"zip": [1]})",
       "error: 'zip' takes an object with 'first' and 'second', found an "
       "array (at /zip)"},
      {R"({"zip": {"first": {"user": "a"}, "second": {"usr": "b"}}})",
       "q.json:1:44: error: unknown key 'usr'"},
      {R"({"augment": {"body": {"user": "q"}, "doc": ["c"], "top": 1}})",
       "q.json:1:13: error: unknown key 'top'; 'augment' takes "
       "embedding_model, body, doc and k (at /augment/top)"},
      {R"({"augment": {"body": {"plus": [{"g": {}}]}, "doc": "c"}})",
       "q.json:1:32: error: 'augment' takes messages as its 'body' (their "
       "text is what it retrieves for), found 'g' (at "
       "/augment/body/plus/0)"},
      {R"({"augment": {"body": {"user": "q"}, "doc": []}})",
       "error: 'doc' takes a corpus name, or [name, document], found an "
       "array (at /augment/doc)"},
      {R"({"augment": {"body": {"user": "q"}, "doc": "c", "k": 0}})",
       "error: 'k' must be in [1, 1000000], got 0 (at /augment/k)"},
      {R"({"bulk": {"Map": {"inputs": "x"}}})",
       "error: 'inputs' takes an array of strings, found a string (at "
       "/bulk/Map/inputs)"},
      {R"({"bulk": []})",
       "error: 'bulk' takes an object {\"repeat\": ...} or {\"map\": ...}, "
       "found an array (at /bulk)"},
      // Options: the op table's ranges in the verifier's words, at the
      // option's object and path; past int64 a number is out of range.
      {R"({"g": {"input": {"user": "x"}, "seed": 18446744073709551615}})",
       "q.json:1:7: error: 'seed' is out of range: must be at most 9e+18, "
       "got 1.8446744073709552e+19 (at /g/seed)"},
      {R"({"g": {"input": {"user": "x"}, "top_p": [1]}})",
       "error: 'top_p' takes a number, not an array (at /g/top_p)"},
      {R"({"repeat": {"n": 2000000000, "query": {"user": "x"}}})",
       "error: 'n' is out of range: must be at most 1000000000, got "
       "2000000000 (at /repeat/n)"},
  };
  // A deeply nested body is an error, not a stack overflow.
  std::string deep = R"({"augment": {"doc": "c", "body": )";
  deep += std::string(20000, '[') + std::string(20000, ']') + "}}";
  Imported nested = import(deep);
  EXPECT_TRUE(nested.ir.empty());
  EXPECT_TRUE(contains(nested.messages, "nesting deeper than 256 levels"))
      << nested.messages.substr(0, 500);
  for (const Case &test : cases) {
    Imported result = import(test.json);
    EXPECT_TRUE(result.ir.empty()) << test.json;
    EXPECT_TRUE(contains(result.messages, test.message)) << test.json << "\n"
                                                         << result.messages;
  }
}
