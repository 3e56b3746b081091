//===- DiagnosticsTest.cpp - Diagnostics stay short whatever the input ----===//
//
// A diagnostic echoes its source line with a caret. A one-line program of
// a megabyte (minified JSON, a body sent to spanc serve) made each
// diagnostic twice that size; now the line is cut to a window around the
// column and a long message to its start.
//
//===----------------------------------------------------------------------===//

#include "ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace spanc;

namespace {

struct Printed {
  llvm::SourceMgr sourceMgr;
  std::string text;
  std::string source;

  explicit Printed(std::string line) : source(std::move(line)) {
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(source, "big.json"), llvm::SMLoc());
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diagnostic, void *out) {
          llvm::raw_string_ostream os(*static_cast<std::string *>(out));
          diagnostic.print(nullptr, os, /*ShowColors=*/false);
        },
        &text);
  }
  void at(size_t offset, const std::string &message) {
    ir::printMessage(sourceMgr,
                     llvm::SMLoc::getFromPointer(source.data() + offset),
                     llvm::SourceMgr::DK_Error, message);
  }
  /// The printed lines.
  std::vector<std::string> lines() const {
    std::vector<std::string> result;
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(text).split(parts, '\n');
    for (llvm::StringRef part : parts)
      result.push_back(part.str());
    return result;
  }
};

TEST(Diagnostics, AMegabyteLineIsEchoedAsAWindowEndingAtTheColumn) {
  std::string line(1 << 20, 'a');
  line[500000] = 'X';
  Printed printed(line + "\n");
  printed.at(500000, "unexpected X");
  std::vector<std::string> lines = printed.lines();
  ASSERT_GE(lines.size(), 3u) << printed.text.substr(0, 500);
  // The position is the true one.
  EXPECT_EQ(lines[0], "big.json:1:500001: error: unexpected X");
  EXPECT_EQ(lines[1], "..." + std::string(80, 'a'));
  // The caret falls just past the window: where the X is.
  EXPECT_EQ(lines[2], std::string(83, ' ') + "^");
  EXPECT_LT(printed.text.size(), 300u);
}

TEST(Diagnostics, AnEarlyColumnKeepsTheLineStartAndItsCaret) {
  std::string line = "0123456789" + std::string(100000, 'b');
  Printed printed(line);
  printed.at(4, "here");
  std::vector<std::string> lines = printed.lines();
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[1], line.substr(0, ir::kMaxEchoedLine) + "...");
  EXPECT_EQ(lines[2], "    ^");
}

TEST(Diagnostics, ShortLinesAndMessagesAreUntouched) {
  Printed printed("query q { user nosuch }\n");
  printed.at(15, "unknown name 'nosuch'");
  EXPECT_EQ(printed.text, "big.json:1:16: error: unknown name 'nosuch'\n"
                          "query q { user nosuch }\n"
                          "               ^\n");
}

TEST(Diagnostics, ALongMessageIsCutWithTheCountOfWhatWasLeftOut) {
  Printed printed("x\n");
  printed.at(0, "token '" + std::string(100000, 'z') + "'");
  EXPECT_LT(printed.text.size(), 1200u);
  EXPECT_NE(printed.text.find("... (98984 more bytes)"), std::string::npos)
      << printed.text.substr(0, 200);
}

TEST(Diagnostics, TheEngineShortensToo) {
  std::string line(200000, '[');
  llvm::SourceMgr sourceMgr;
  std::string text;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *out) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(out));
        diagnostic.print(nullptr, os, /*ShowColors=*/false);
      },
      &text);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(line, "deep.json"), llvm::SMLoc());
  ir::DiagnosticEngine diagnostics(sourceMgr);
  diagnostics.registerBuffer("deep.json", id);
  diagnostics.emit(llvm::SMLoc::getFromPointer(line.data() + 150000),
                   llvm::SourceMgr::DK_Error, "too deep");
  diagnostics.error(diagnostics.getLocation(
                        llvm::SMLoc::getFromPointer(line.data() + 150000)),
                    "too deep again");
  EXPECT_LT(text.size(), 600u) << text.size();
  EXPECT_NE(text.find("deep.json:1:150001: error: too deep\n"),
            std::string::npos);
  EXPECT_NE(text.find("deep.json:1:150001: error: too deep again\n"),
            std::string::npos);
}

TEST(Diagnostics, ErrorsPastTheLimitAreCountedNotPrinted) {
  std::string line(100000, 'x');
  llvm::SourceMgr sourceMgr;
  std::string text;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *out) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(out));
        diagnostic.print(nullptr, os, /*ShowColors=*/false);
      },
      &text);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(line, "many.span"), llvm::SMLoc());
  ir::DiagnosticEngine diagnostics(sourceMgr);
  diagnostics.registerBuffer("many.span", id);
  for (size_t index = 0; index < 10000; ++index) {
    llvm::SMLoc loc = llvm::SMLoc::getFromPointer(line.data() + index * 10);
    diagnostics.emit(loc, llvm::SourceMgr::DK_Error, "bad");
    diagnostics.emit(loc, llvm::SourceMgr::DK_Note, "see here");
  }
  EXPECT_EQ(diagnostics.getNumErrors(), 10000u);
  size_t errors = 0, notes = 0;
  for (size_t at = text.find(": error: bad"); at != std::string::npos;
       at = text.find(": error: bad", at + 1))
    ++errors;
  for (size_t at = text.find(": note: see here"); at != std::string::npos;
       at = text.find(": note: see here", at + 1))
    ++notes;
  EXPECT_EQ(errors, ir::kMaxPrintedErrors);
  EXPECT_EQ(notes, ir::kMaxPrintedErrors);
  EXPECT_NE(text.find(std::string("note: ") + ir::kTooManyErrors),
            std::string::npos);
  EXPECT_LT(text.size(), 64 * 1024u);
}

} // namespace
