//===- BenchCommonTest.cpp - bench/common: settings, statistics, files ----===//

#include "bench/common/Bench.h"
#include "bench/common/Report.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace spanc;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

TEST(BenchArgsTest, SettingsParseOrNameTheKey) {
  bench::BenchArgs args;
  args.settings = {{"docs", "1,2, 4"}, {"reps", "3"}, {"bad", "x"}};
  EXPECT_EQ(args.setting("missing", "fallback"), "fallback");
  llvm::Expected<int64_t> reps = args.intSetting("reps", 9);
  ASSERT_TRUE(bool(reps));
  EXPECT_EQ(*reps, 3);
  llvm::Expected<int64_t> absent = args.intSetting("absent", 9);
  ASSERT_TRUE(bool(absent));
  EXPECT_EQ(*absent, 9);
  llvm::Expected<std::vector<int64_t>> docs = args.intListSetting("docs", {8});
  ASSERT_TRUE(bool(docs));
  EXPECT_THAT(*docs, ElementsAre(1, 2, 4));
  llvm::Expected<int64_t> bad = args.intSetting("bad", 0);
  ASSERT_FALSE(bool(bad));
  EXPECT_THAT(llvm::toString(bad.takeError()), HasSubstr("--set bad=x"));
  llvm::Expected<std::vector<int64_t>> badList = args.intListSetting("bad", {});
  ASSERT_FALSE(bool(badList));
  llvm::consumeError(badList.takeError());
}

TEST(BenchArgsTest, RepetitionsFollowQuickUnlessGiven) {
  bench::BenchArgs args;
  EXPECT_EQ(args.repetitionsOr(10, 1), 10);
  args.quick = true;
  EXPECT_EQ(args.repetitionsOr(10, 1), 1);
  args.repetitions = 4;
  EXPECT_EQ(args.repetitionsOr(10, 1), 4);
}

TEST(ReportTest, SummaryOfKnownSamples) {
  std::vector<double> samples = {5, 1, 4, 2, 3};
  bench::Summary summary = bench::summarize(samples);
  EXPECT_EQ(summary.count, 5u);
  EXPECT_DOUBLE_EQ(summary.median, 3);
  EXPECT_DOUBLE_EQ(summary.mean, 3);
  EXPECT_DOUBLE_EQ(summary.min, 1);
  EXPECT_DOUBLE_EQ(summary.max, 5);
  EXPECT_NEAR(summary.stdev, 1.5811388, 1e-6);
  // Linear interpolation between order statistics.
  EXPECT_DOUBLE_EQ(bench::quantile(samples, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(bench::quantile({2, 4}, 0.5), 3);
  EXPECT_DOUBLE_EQ(bench::quantile({}, 0.5), 0);
  EXPECT_EQ(bench::formatSpread(summary, 1), "3.0 [1.0, 5.0]");
  EXPECT_EQ(bench::summarize({}).count, 0u);
}

TEST(ReportTest, WriteTextFileCreatesFoldersAndReplaces) {
  llvm::SmallString<128> folder;
  ASSERT_FALSE(
      llvm::sys::fs::createUniqueDirectory("bench-common-test", folder));
  llvm::SmallString<128> path(folder);
  llvm::sys::path::append(path, "nested", "result.md");
  ASSERT_FALSE(bool(bench::writeTextFile(path, "first")));
  ASSERT_FALSE(bool(bench::writeTextFile(path, "second")));
  auto buffer = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(buffer));
  EXPECT_EQ((*buffer)->getBuffer(), "second");
  llvm::sys::fs::remove_directories(folder);
}

TEST(ReportTest, MachineAndLoadAreDescribed) {
  EXPECT_THAT(bench::describeMachine(), HasSubstr("CPUs"));
  bench::LoadSampler sampler;
  EXPECT_THAT(sampler.stopAndDescribe(), HasSubstr("load average"));
}

} // namespace
