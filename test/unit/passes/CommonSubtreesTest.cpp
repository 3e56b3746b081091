//===- CommonSubtreesTest.cpp - Tests of cse ------------------------------===//

#include "test/unit/passes/PassTestUtils.h"

namespace {

TEST(CommonSubtrees, IdenticalLeavesAndGreedyGensAreComputedOnce) {
  EXPECT_REWRITES("cse", R"(
span.query @q {
  %a = span.user "same"
  %g1 = span.gen %a {temperature = 0.0}
  %b = span.user "same"
  %g2 = span.gen %b {temperature = 0}
  %c = span.user "same"
  %g3 = span.gen %c {temperature = 0.0}
  %p = span.plus %g1, %g3, %g2
  span.yield %p
}
)",
                  R"(
span.query @q {
  %a = span.user "same"
  %g1 = span.gen %a {temperature = 0.0}
  %g2 = span.gen %a {temperature = 0}
  %p = span.plus %g1, %g1, %g2
  span.yield %p
}
)");
}

TEST(CommonSubtrees, SampledGensAreNeverMerged) {
  const char *input = R"(
span.query @q {
  %a = span.user "same"
  %g1 = span.gen %a {temperature = 0.7}
  %g2 = span.gen %a {temperature = 0.7}
  %g3 = span.gen %a
  %g4 = span.gen %a
  %p = span.plus %g1, %g2, %g3, %g4
  span.yield %p
}
)";
  EXPECT_REWRITES("cse", input, input);
}

TEST(CommonSubtreesTest, RepeatsMergeOnlyWhenTheirBodyIsDeterministic) {
  EXPECT_REWRITES("cse", R"(
span.query @q {
  %a = span.user "a"
  %sampled = span.gen %a {temperature = 1.0}
  %x = span.cross %a, %sampled
  %greedy = span.gen %x {temperature = 0.0}
  %r1 = span.repeat %greedy {n = 2}
  %r2 = span.repeat %greedy {n = 2}
  %fixed = span.gen %a {temperature = 0.0}
  %r3 = span.repeat %fixed {n = 2}
  %r4 = span.repeat %fixed {n = 2}
  %p = span.plus %r1, %r2, %r3, %r4
  span.yield %p
}
)",
                  R"(
span.query @q {
  %a = span.user "a"
  %sampled = span.gen %a {temperature = 1.0}
  %x = span.cross %a, %sampled
  %greedy = span.gen %x {temperature = 0.0}
  %r1 = span.repeat %greedy {n = 2}
  %r2 = span.repeat %greedy {n = 2}
  %fixed = span.gen %a {temperature = 0.0}
  %r3 = span.repeat %fixed {n = 2}
  %p = span.plus %r1, %r2, %r3, %r3
  span.yield %p
}
)");
}

TEST(CommonSubtrees, GreedyGenOverOneSampledValueIsMerged) {
  // Both read the same sample (one SSA value), so they see the same input.
  EXPECT_REWRITES("cse", R"(
span.query @q {
  %a = span.user "a"
  %s = span.gen %a {temperature = 1.0}
  %g1 = span.gen %s {temperature = 0.0}
  %g2 = span.gen %s {temperature = 0.0}
  %p = span.plus %g1, %g2
  span.yield %p
}
)",
                  R"(
span.query @q {
  %a = span.user "a"
  %s = span.gen %a {temperature = 1.0}
  %g1 = span.gen %s {temperature = 0.0}
  %p = span.plus %g1, %g1
  span.yield %p
}
)");
}

TEST(CommonSubtrees, DifferentTextsOptionsOrOrderAreDifferent) {
  const char *input = R"(
span.query @q {
  %a = span.user "a"
  %b = span.user "b"
  %s = span.system "a"
  %x = span.cross %a, %b
  %y = span.cross %b, %a
  %g1 = span.gen %x {max_tokens = 4, temperature = 0.0}
  %g2 = span.gen %x {max_tokens = 5, temperature = 0.0}
  %p = span.plus %s, %y, %g1, %g2
  span.yield %p
}
)";
  EXPECT_REWRITES("cse", input, input);
}

} // namespace
