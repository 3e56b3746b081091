//===- QualityHelpersTest.cpp - Scoring helpers of needle and accuracy ----===//
//
// The pieces the quality benchmarks' figures rest on: the Wilson interval
// (against values computed by hand from the formula), case-insensitive
// matching of answers, and the seeded, distinct person names.
//
//===----------------------------------------------------------------------===//
#include "bench/common/ModelSession.h"
#include "bench/common/Names.h"

#include <gtest/gtest.h>

#include <set>

using namespace spanc::bench;

namespace {

TEST(WilsonInterval, MatchesTheFormulaAtHalfAndAtTheEdges) {
  // 5 of 10: center 0.5, half-width 1.96*sqrt(0.025+0.0096)/1.384.
  auto [low, high] = wilsonInterval(5, 10);
  EXPECT_NEAR(low, 0.2366, 1e-4);
  EXPECT_NEAR(high, 0.7634, 1e-4);
  // 0 of 20: the lower end is 0, the upper z²/(n+z²) = 0.1611.
  auto [zeroLow, zeroHigh] = wilsonInterval(0, 20);
  EXPECT_NEAR(zeroLow, 0.0, 1e-12);
  EXPECT_NEAR(zeroHigh, 0.1611, 1e-4);
  // 100 of 100 mirrors it: 1 - z²/(n+z²) = 0.9630.
  auto [fullLow, fullHigh] = wilsonInterval(100, 100);
  EXPECT_NEAR(fullLow, 0.9630, 1e-4);
  EXPECT_NEAR(fullHigh, 1.0, 1e-12);
  // No trials: no information.
  auto [noneLow, noneHigh] = wilsonInterval(0, 0);
  EXPECT_EQ(noneLow, 0.0);
  EXPECT_EQ(noneHigh, 1.0);
}

TEST(ContainsIgnoringCase, FindsNamesWhateverTheirCase) {
  EXPECT_TRUE(
      containsIgnoringCase("The visitor was grace MOREAU.", "Grace Moreau"));
  EXPECT_FALSE(containsIgnoringCase("The visitor was Grace.", "Grace Moreau"));
  EXPECT_FALSE(containsIgnoringCase("", "Grace"));
}

TEST(PersonNames, AreDistinctInBothPartsAndSeeded) {
  std::mt19937_64 random(42);
  std::vector<std::string> names = personNames(random, maxDistinctNames());
  ASSERT_EQ(names.size(), maxDistinctNames());
  std::set<std::string> firsts, lasts;
  for (const std::string &name : names) {
    size_t space = name.find(' ');
    ASSERT_NE(space, std::string::npos) << name;
    EXPECT_TRUE(firsts.insert(name.substr(0, space)).second) << name;
    EXPECT_TRUE(lasts.insert(name.substr(space + 1)).second) << name;
  }
  std::mt19937_64 first(7), again(7), other(8);
  std::vector<std::string> drawn = personNames(first, 5);
  EXPECT_EQ(personNames(again, 5), drawn);
  EXPECT_NE(personNames(other, 5), drawn);
}

} // namespace
