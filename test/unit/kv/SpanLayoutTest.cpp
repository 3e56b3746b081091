//===- SpanLayoutTest.cpp - Span mode names and the span-layout rules -----===//

#include "runtime/kv/SpanLayout.h"

#include <gtest/gtest.h>

using namespace spanc;
using namespace spanc::kv;

namespace {

TEST(SpanModeName, EveryNameReadsBackAsTheOptionsItNames) {
  for (const char *name :
       {"prefix", "isolated", "prefix+end1", "prefix+recompute1+end1",
        "isolated+recompute2", "prefix+end1+blend15", "prefix+guided20",
        "prefix+end1+guided5+last", "prefix+guided30+upper+tokens+near1",
        "prefix+temp80+mass120", "isolated+end1+blend100"}) {
    auto options = parseSpanMode(name);
    ASSERT_TRUE(bool(options))
        << name << ": " << llvm::toString(options.takeError());
    EXPECT_EQ(spanModeName(*options), name);
    EXPECT_FALSE(bool(checkSpanOptions(*options))) << name;
  }
}

TEST(SpanModeName, ANameSpellsEveryRecomputeAndSetting) {
  auto prefix = parseSpanMode("prefix");
  ASSERT_TRUE(bool(prefix));
  EXPECT_EQ(prefix->recomputeBlocks, 0u);
  EXPECT_EQ(prefix->recomputeEndBlocks, 0u);
  EXPECT_FALSE(prefix->repairs());
  auto guided = parseSpanMode("isolated+end2+guided25+upper+tokens+near3");
  ASSERT_TRUE(bool(guided));
  EXPECT_EQ(guided->context, SpanContext::Isolated);
  EXPECT_EQ(guided->recomputeEndBlocks, 2u);
  EXPECT_EQ(guided->guidedPercent, 25u);
  EXPECT_EQ(guided->guidedLayers, RepairLayers::Upper);
  EXPECT_EQ(guided->guidedGranularity, RepairGranularity::Token);
  EXPECT_EQ(guided->guidedNeighbours, 3u);
  EXPECT_TRUE(guided->repairs());
  // The default options are the default mode's name.
  EXPECT_EQ(spanModeName(SpanOptions()), "prefix+end1");
}

TEST(SpanModeName, RefusesWhatItCannotRun) {
  for (const char *name :
       {"", "shared", "prefix+end0", "prefix+end65", "prefix+blend101",
        "prefix+guided0", "prefix+last", "prefix+tokens",
        "prefix+blend10+"
        "guided10",
        "prefix+guided10+near9", "prefix+temp5", "prefix+end1x"}) {
    auto options = parseSpanMode(name);
    EXPECT_FALSE(bool(options)) << name;
    if (!options) {
      EXPECT_NE(llvm::toString(options.takeError()).find("span mode '"),
                std::string::npos);
    }
  }
}

TEST(CheckSpanOptions, NamesTheSettingOutOfRange) {
  SpanOptions options;
  options.recomputeEndBlocks = 65;
  EXPECT_EQ(llvm::toString(checkSpanOptions(options)),
            "--span-recompute-end 65: must be in [0, 64] blocks");
  options = SpanOptions();
  options.guidedPercent = 101;
  EXPECT_EQ(llvm::toString(checkSpanOptions(options)),
            "--span-guided 101: a percentage, 0..100");
  options = SpanOptions();
  options.blendPercent = 10;
  options.guidedPercent = 10;
  EXPECT_NE(llvm::toString(checkSpanOptions(options)).find("one of them"),
            std::string::npos);
  options = SpanOptions();
  options.temperature = 0.05f;
  EXPECT_EQ(llvm::toString(checkSpanOptions(options)),
            "--span-temperature 0.05: must be in [0.1, 4]");
}

TEST(RepairStepTokens, CountsTheChosenShareAndWhatChoosesIt) {
  SpanOptions blend;
  blend.blendPercent = 20;
  // 30 % of 1000: the chosen 20 % and the two selection layers (a tenth).
  EXPECT_EQ(repairStepTokens(blend, 1000, 0), 301);
  SpanOptions guided;
  guided.guidedPercent = 10;
  // The chosen 10 % and the probe's 25 question tokens.
  EXPECT_EQ(repairStepTokens(guided, 1000, 25), 126);
  EXPECT_GE(repairStepTokens(guided, 0, 0), 1);
}

} // namespace
