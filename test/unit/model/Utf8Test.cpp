//===- Utf8Test.cpp - UTF-8 as the tokenizers read it
//----------------------===//

#include "runtime/model/Utf8.h"

#include <gtest/gtest.h>

using namespace spanc::model;

namespace {

TEST(Utf8, EncodesEveryLength) {
  std::string out;
  for (uint32_t codePoint : {0x41u, 0xe9u, 0x20acu, 0x1f600u})
    appendUtf8(out, codePoint);
  EXPECT_EQ(out, "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  size_t offset = 0;
  uint32_t codePoint = 0;
  for (uint32_t expected : {0x41u, 0xe9u, 0x20acu, 0x1f600u}) {
    ASSERT_TRUE(decodeUtf8(out, offset, codePoint));
    EXPECT_EQ(codePoint, expected);
  }
  EXPECT_EQ(offset, out.size());
}

TEST(Utf8, RejectsWhatPcre2WouldRejectOneByteAtATime) {
  // Overlong '/', a surrogate, past U+10FFFF, a truncated sequence, a
  // stray continuation byte.
  for (llvm::StringRef bad :
       {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"}) {
    size_t offset = 0;
    uint32_t codePoint = 0;
    EXPECT_FALSE(decodeUtf8(bad, offset, codePoint)) << bad.str();
    EXPECT_EQ(offset, 1u);
  }
  // One U+FFFD per invalid byte.
  EXPECT_EQ(sanitizeUtf8("a\xe2\x82z"), "a\xef\xbf\xbd\xef\xbf\xbdz");
  EXPECT_EQ(sanitizeUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(sanitizeUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
}

TEST(Utf8, CountsAStrayContinuationByteAsOne) {
  EXPECT_EQ(utf8Length(0x41), 1u);
  EXPECT_EQ(utf8Length(0x80), 1u);
  EXPECT_EQ(utf8Length(0xc3), 2u);
  EXPECT_EQ(utf8Length(0xe2), 3u);
  EXPECT_EQ(utf8Length(0xf0), 4u);
}

} // namespace
