//===- JsonDepthTest.cpp - The JSON nesting limit, before any document ----===//
//
// 256 levels pass, the bracket opening level 257 is found where it is, and
// a document 100 000 levels deep is refused in time and memory that do not
// grow with its depth (it cost 12 GB and 30 s in the importer before).
//
//===----------------------------------------------------------------------===//

#include "support/JsonDepth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <sys/resource.h>

namespace spanc::support {
namespace {

std::string nested(size_t levels, const std::string &open,
                   const std::string &close) {
  std::string text;
  for (size_t level = 0; level < levels; ++level)
    text += open;
  for (size_t level = 0; level < levels; ++level)
    text += close;
  return text;
}

/// The process's peak resident memory so far, in KiB.
long peakKiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(JsonDepth, TheLimitPassesAndTheNextLevelIsFoundWhereItOpens) {
  EXPECT_EQ(findJsonDepthExcess(nested(256, "[", "]")), std::nullopt);
  EXPECT_EQ(findJsonDepthExcess(nested(257, "[", "]")), 256u);
  // Objects count as arrays do; an incomplete document is still stopped at
  // the level past the limit.
  std::string objects = nested(300, R"({"a": )", "}");
  EXPECT_EQ(findJsonDepthExcess(objects), 256u * 6);
  EXPECT_EQ(findJsonDepthExcess(std::string(1000, '[')), 256u);
  EXPECT_EQ(findJsonDepthExcess(nested(3, "[", "]"), 2), 2u);
}

TEST(JsonDepth, BracketsInStringsAndInvalidTextAreNotLevels) {
  EXPECT_EQ(findJsonDepthExcess("[\"" + std::string(1000, '[') + "\"]"),
            std::nullopt);
  // Escaped quotes do not end the string.
  EXPECT_EQ(findJsonDepthExcess(R"(["\"[[[[", 1])", 2), std::nullopt);
  // The parser stops at the syntax error before any deep bracket.
  EXPECT_EQ(findJsonDepthExcess("[1 2 " + std::string(1000, '[')),
            std::nullopt);
  EXPECT_EQ(findJsonDepthExcess(""), std::nullopt);
}

TEST(JsonDepth, AHundredThousandLevelsAreRefusedFastInBoundedMemory) {
  std::string text;
  for (int level = 0; level < 100000; ++level)
    text += R"({"cross":[)";
  const long before = peakKiB();
  const auto start = std::chrono::steady_clock::now();
  std::optional<size_t> excess = findJsonDepthExcess(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const long grownKiB = peakKiB() - before;
  std::printf("100 000 levels refused in %.6f s, peak memory +%ld KiB\n",
              seconds, grownKiB);
  // Level 257 is the 129th '{': ten bytes apart, the first at 0.
  EXPECT_EQ(excess, 1280u);
  // Generous bounds: what matters is that neither grows with the depth
  // (microseconds and nothing measurable here).
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(grownKiB, 16 * 1024);
}

TEST(JsonDepth, LineAndColumnCountFromOne) {
  EXPECT_EQ(jsonLineAndColumn("[[", 1), "line 1, column 2");
  EXPECT_EQ(jsonLineAndColumn("[\n [\n  [", 7), "line 3, column 3");
  EXPECT_EQ(jsonLineAndColumn("", 0), "line 1, column 1");
}

} // namespace
} // namespace spanc::support
