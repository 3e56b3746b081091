//===- ModelSessionTest.cpp - bench/common ModelSession helpers ----------===//
//
// spanLiteral must turn any text (corpus fragments carry quotes, backslashes,
// newlines and control characters) into a .span string whose value is the
// text again: the IR's unescapeString is the reference decoder.
//
//===----------------------------------------------------------------------===//

#include "bench/common/ModelSession.h"
#include "ir/Parser.h"

#include "gtest/gtest.h"

using namespace spanc;

namespace {

std::string decode(llvm::StringRef literal) {
  EXPECT_TRUE(literal.startswith("\"") && literal.endswith("\""));
  std::string value;
  size_t errorOffset = 0;
  EXPECT_TRUE(
      ir::unescapeString(literal.drop_front().drop_back(), value, errorOffset))
      << "bad escape at " << errorOffset << " in " << literal.str();
  return value;
}

TEST(SpanLiteral, RoundTripsQuotesBackslashesAndControlCharacters) {
  const std::string texts[] = {
      "",
      "plain words",
      "a \"quoted\" word and \"\"\"triple\"\"\" quotes",
      "C:\\path\\n is not a newline",
      "line one\nline two\r\n\ttabbed",
      "bell\x07 and control\x01 bytes\x1f",
      "UTF-8 stays as it is: caf\xc3\xa9 \xe2\x8b\x88",
  };
  for (const std::string &text : texts) {
    std::string literal = bench::spanLiteral(text);
    EXPECT_EQ(literal.find('\n'), std::string::npos) << literal;
    EXPECT_EQ(decode(literal), text);
  }
}

TEST(SpanLiteral, EscapesControlCharactersAsUnicode) {
  EXPECT_EQ(bench::spanLiteral(std::string("a\x02z", 3)), "\"a\\u0002z\"");
}

TEST(FormatRatio, SaysMissingWhenASideIsMissing) {
  EXPECT_EQ(bench::formatRatio(10, 4), "2.5×");
  EXPECT_EQ(bench::formatRatio(0, 4), "—");
  EXPECT_EQ(bench::formatRatio(10, 0), "—");
}

} // namespace
