//===- SpanRepairTest.cpp - The repairs' selection rules, without a model -===//

#include "runtime/sched/SpanRepair.h"

#include <gtest/gtest.h>

using namespace spanc;
using namespace spanc::sched;

namespace {

std::vector<uint8_t> flags(std::initializer_list<int> values) {
  return std::vector<uint8_t>(values.begin(), values.end());
}

TEST(RepairLayerBand, NamesTheLayersOfEachBand) {
  EXPECT_EQ(repairLayerBand(kv::RepairLayers::All, 30),
            std::make_pair(0u, 30u));
  EXPECT_EQ(repairLayerBand(kv::RepairLayers::Last, 30),
            std::make_pair(29u, 30u));
  EXPECT_EQ(repairLayerBand(kv::RepairLayers::Upper, 30),
            std::make_pair(15u, 22u));
  // A band is never empty.
  EXPECT_EQ(repairLayerBand(kv::RepairLayers::Upper, 1),
            std::make_pair(0u, 1u));
}

TEST(SelectBlendTokens, ChoosesForcedTokensThenThoseThatMovedMost) {
  // 10 tokens, 20 %: two besides the forced one; a tie goes to the earlier.
  std::vector<float> distances = {0.1f, 5, 0.2f, 3, 3, 0, 9, 0, 0, 1};
  auto forced = flags({0, 0, 0, 0, 0, 0, 1, 0, 0, 0});
  EXPECT_EQ(selectBlendTokens(distances, forced, 20),
            flags({0, 1, 0, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(selectBlendTokens(distances, forced, 100),
            flags({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(
      selectBlendTokens(distances, flags({0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), 1),
      flags({0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
}

std::vector<RepairUnit> units(std::initializer_list<float> masses,
                              std::initializer_list<int> candidates,
                              std::initializer_list<uint32_t> spans) {
  std::vector<RepairUnit> result;
  auto candidate = candidates.begin();
  auto span = spans.begin();
  for (float mass : masses)
    result.push_back({mass, false, *candidate++ != 0, *span++});
  return result;
}

TEST(SelectGuidedUnits, ChoosesTheCandidatesThatReceivedMostAttention) {
  // The first span saw everything before it: never a candidate, however
  // much attention it received.
  auto blocks = units({9, 8, 0.5f, 3, 0.2f, 0.1f, 2, 0.3f},
                      {0, 0, 1, 1, 1, 1, 1, 1}, {1, 1, 2, 2, 2, 3, 3, 3});
  // 8 blocks at 25 %: two.
  EXPECT_EQ(selectGuidedUnits(blocks, 25, 0), flags({0, 0, 0, 1, 0, 0, 1, 0}));
  // At 100 % every candidate, and only candidates.
  EXPECT_EQ(selectGuidedUnits(blocks, 100, 0), flags({0, 0, 1, 1, 1, 1, 1, 1}));
  // Ties go to the earlier block, so a hit chooses as the miss did.
  auto tied = units({1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1});
  EXPECT_EQ(selectGuidedUnits(tied, 50, 0), flags({1, 1, 0, 0}));
}

TEST(SelectGuidedUnits, AddsForcedUnitsAndNeighboursInsideTheSpan) {
  auto blocks = units({9, 8, 0.5f, 3, 0.2f, 0.1f, 2, 0.3f},
                      {0, 0, 1, 1, 1, 1, 1, 1}, {1, 1, 2, 2, 2, 3, 3, 3});
  blocks[7].forced = true;
  // 8 blocks at 12 %: one chosen (block 3), plus the forced block 7.
  EXPECT_EQ(selectGuidedUnits(blocks, 12, 0), flags({0, 0, 0, 1, 0, 0, 0, 1}));
  // Its neighbours 2 and 4 are of its span; block 5 (span 3) is not one.
  blocks[7].forced = false;
  EXPECT_EQ(selectGuidedUnits(blocks, 25, 1), flags({0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(selectGuidedUnits(blocks, 12, 1), flags({0, 0, 1, 1, 1, 0, 0, 0}));
}

} // namespace
