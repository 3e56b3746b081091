//===- TreeReduceTest.cpp - Tests of tree-reduce --------------------------===//

#include "test/unit/passes/PassTestUtils.h"

#include "llvm/ADT/StringExtras.h"

namespace {

using spanc::passes::PassOptions;
using spanc::passes::testing::runPipeline;

/// A judge over `n` candidates, optionally with `reduce = k`.
std::string judge(int n, int reduce = 0) {
  std::string text = "span.query @judge {\n  %s = span.system \"pick\"\n";
  std::string summands;
  for (int i = 0; i < n; ++i) {
    text += "  %c" + std::to_string(i) + " = span.fragment \"c" +
            std::to_string(i) + "\"\n";
    summands += (i ? ", %c" : "%c") + std::to_string(i);
  }
  text += "  %p = span.plus " + summands + "\n";
  text += "  %u = span.user \"which?\"\n  %x = span.cross %s, %p, %u\n";
  text += "  %j = span.gen %x {max_tokens = 8";
  if (reduce)
    text += ", reduce = " + std::to_string(reduce);
  text += "}\n  span.yield %j\n}\n";
  return text;
}

size_t count(llvm::StringRef text, llvm::StringRef what) {
  return text.count(what);
}

TEST(TreeReduce, FourCandidatesByTwoMakeTwoLeavesAndARoot) {
  EXPECT_REWRITES("tree-reduce", judge(4, 2), R"(
span.query @judge {
  %s = span.system "pick"
  %c0 = span.fragment "c0"
  %c1 = span.fragment "c1"
  %c2 = span.fragment "c2"
  %c3 = span.fragment "c3"
  %u = span.user "which?"
  %p1 = span.plus %c0, %c1
  %x1 = span.cross %s, %p1, %u
  %g1 = span.gen %x1 {max_tokens = 8, reduce = 2}
  %p2 = span.plus %c2, %c3
  %x2 = span.cross %s, %p2, %u
  %g2 = span.gen %x2 {max_tokens = 8, reduce = 2}
  %p = span.plus %g1, %g2
  %x = span.cross %s, %p, %u
  %j = span.gen %x {max_tokens = 8, reduce = 2}
  span.yield %j
}
)");
}

TEST(TreeReduce, TakesCeilLogKRounds) {
  // n = 5, k = 2: 5 -> 3 (two gens and one passing) -> 2 -> the root:
  // three rounds, ceil(log2 5) = 3, and 2 + 1 + 1 gens.
  auto result = runPipeline(judge(5, 2), "tree-reduce");
  ASSERT_TRUE(result.ok) << result.diagnostics;
  EXPECT_EQ(count(result.ir, "span.gen"), 4u) << result.ir;
  // n = 9, k = 3: 3 leaves and the root.
  result = runPipeline(judge(9, 3), "tree-reduce");
  ASSERT_TRUE(result.ok) << result.diagnostics;
  EXPECT_EQ(count(result.ir, "span.gen"), 4u) << result.ir;
  // n = 10, k = 3: 4 leaves (3,3,2,2), then 2 (2,2), then the root.
  result = runPipeline(judge(10, 3), "tree-reduce");
  ASSERT_TRUE(result.ok) << result.diagnostics;
  EXPECT_EQ(count(result.ir, "span.gen"), 7u) << result.ir;
  // No + in the output has more than k children.
  for (llvm::StringRef line : llvm::split(result.ir, '\n')) {
    if (line.contains("span.plus")) {
      EXPECT_LE(line.count('%'), 4u) << line.str(); // result + at most 3
    }
  }
}

TEST(TreeReduce, FanInUpToKIsANoOp) {
  EXPECT_REWRITES("tree-reduce", judge(2, 2), judge(2, 2));
  EXPECT_REWRITES("tree-reduce", judge(3, 4), judge(3, 4));
}

TEST(TreeReduce, WithoutReduceNothingHappensUnlessTheOptionAsks) {
  EXPECT_REWRITES("tree-reduce", judge(6), judge(6));
  PassOptions options;
  options.treeReduce = 3;
  auto result = runPipeline(judge(6), "tree-reduce", options);
  ASSERT_TRUE(result.ok) << result.diagnostics;
  EXPECT_EQ(result.ir, spanc::passes::testing::canonical(
                           runPipeline(judge(6, 3), "tree-reduce").ir));
  // The gen's own reduce wins over the option.
  result = runPipeline(judge(6, 2), "tree-reduce", options);
  ASSERT_TRUE(result.ok);
  EXPECT_EQ(result.ir, runPipeline(judge(6, 2), "tree-reduce").ir);
}

TEST(TreeReduce, RepeatSamplesAreSplitIntoSmallerRepeats) {
  EXPECT_REWRITES("tree-reduce", R"(
span.query @q {
  %w = span.user "write"
  %g = span.gen %w {temperature = 0.7}
  %r = span.repeat %g {n = 4}
  %p = span.plus %r
  %j = span.gen %p {reduce = 2}
  span.yield %j
}
)",
                  R"(
span.query @q {
  %w = span.user "write"
  %g = span.gen %w {temperature = 0.7}
  %r1 = span.repeat %g {n = 2}
  %p1 = span.plus %r1
  %j1 = span.gen %p1 {reduce = 2}
  %r2 = span.repeat %g {n = 2}
  %p2 = span.plus %r2
  %j2 = span.gen %p2 {reduce = 2}
  %p = span.plus %j1, %j2
  %j = span.gen %p {reduce = 2}
  span.yield %j
}
)");
}

TEST(TreeReduce, IsIdempotent) {
  for (int n : {3, 5, 8, 17}) {
    auto once = runPipeline(judge(n, 2), "tree-reduce");
    auto twice = runPipeline(judge(n, 2), "tree-reduce,tree-reduce");
    ASSERT_TRUE(once.ok && twice.ok);
    EXPECT_EQ(once.ir, twice.ir) << "n = " << n;
  }
}

TEST(TreeReduce, FanInOneIsRejected) {
  PassOptions options;
  options.treeReduce = 1;
  auto result = runPipeline(judge(3), "tree-reduce", options);
  EXPECT_FALSE(result.ok);
  // (The message itself has no location, so it goes to stderr.)
  EXPECT_NE(result.diagnostics.find("pass 'tree-reduce' failed"),
            std::string::npos)
      << result.diagnostics;
}

} // namespace
