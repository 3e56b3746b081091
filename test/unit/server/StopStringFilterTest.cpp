//===- StopStringFilterTest.cpp - Stop strings cut from streamed text -----===//

#include "server/StopStringFilter.h"

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

/// What a client receives: every release, then the rest.
std::string stream(StopStringFilter &filter,
                   const std::vector<std::string> &pieces,
                   std::vector<std::string> *releases = nullptr) {
  std::string text;
  for (const std::string &piece : pieces) {
    std::string released = filter.push(piece);
    if (releases)
      releases->push_back(released);
    text += released;
  }
  return text + filter.finish();
}

TEST(StopStringFilter, CutsAStopStringSplitAcrossPieces) {
  StopStringFilter filter({"END"});
  std::vector<std::string> releases;
  EXPECT_EQ(stream(filter, {"ab", "cE", "N", "D", "tail"}, &releases), "abc");
  EXPECT_TRUE(filter.stopped());
  // "E" and "EN" were held back until they turned out to begin "END".
  EXPECT_EQ(releases, (std::vector<std::string>{"ab", "c", "", "", ""}));
}

TEST(StopStringFilter, ReleasesAHeldPrefixThatDidNotBecomeAStop) {
  StopStringFilter filter({"END", "stop"});
  std::vector<std::string> releases;
  EXPECT_EQ(stream(filter, {"xE", "Nx", "st"}, &releases), "xENxst");
  EXPECT_FALSE(filter.stopped());
  EXPECT_EQ(releases, (std::vector<std::string>{"x", "ENx", ""}));
}

TEST(StopStringFilter, TheEarliestStopStringWins) {
  StopStringFilter filter({"cd", "b"});
  EXPECT_EQ(stream(filter, {"abcd"}), "a");
}

TEST(StopStringFilter, WithoutStopStringsEverythingPassesAtOnce) {
  StopStringFilter filter({""});
  EXPECT_EQ(filter.push("hello"), "hello");
  EXPECT_EQ(filter.finish(), "");
}

TEST(StopStringFilter, NeverReleasesHalfAUtf8Character) {
  StopStringFilter filter({});
  // "é" is C3 A9, "€" is E2 82 AC: byte-level tokens split them.
  EXPECT_EQ(filter.push("a\xC3"), "a");
  EXPECT_EQ(filter.push("\xA9\xE2\x82"), "\xC3\xA9");
  EXPECT_EQ(filter.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(filter.finish(), "");
}

} // namespace
} // namespace spanc::server
