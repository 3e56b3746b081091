//===- PlusDistributeTest.cpp - Tests of plus-distribute ------------------===//

#include "test/unit/passes/PassTestUtils.h"

namespace {

TEST(PlusDistribute, InnerGensUnderAConsumedPlusArePrecededByTheirInputs) {
  EXPECT_REWRITES("plus-distribute", R"(
span.query @judge {
  %s = span.system "pick"
  %x1 = span.user "one"
  %g1 = span.gen %x1 {temperature = 0.7}
  %x2 = span.user "two"
  %g2 = span.gen %x2 {temperature = 0.7}
  %f = span.fragment "f"
  %p = span.plus %g1, %f, %g2
  %u = span.user "which?"
  %x = span.cross %s, %p, %u
  %j = span.gen %x
  span.yield %j
}
)",
                  R"(
span.query @judge {
  %s = span.system "pick"
  %x1 = span.user "one"
  %g1 = span.gen %x1 {temperature = 0.7}
  %x2 = span.user "two"
  %g2 = span.gen %x2 {temperature = 0.7}
  %f = span.fragment "f"
  %d1 = span.cross %x1, %g1
  %d2 = span.cross %x2, %g2
  %p = span.plus %d1, %f, %d2
  %u = span.user "which?"
  %x = span.cross %s, %p, %u
  %j = span.gen %x
  span.yield %j
}
)");
}

TEST(PlusDistribute, RepeatedSamplesEachFollowTheirInput) {
  EXPECT_REWRITES("plus-distribute", R"(
span.query @q {
  %x = span.user "write"
  %g = span.gen %x {temperature = 0.7}
  %r = span.repeat %g {n = 4}
  %p = span.plus %r
  %j = span.gen %p
  span.yield %j
}
)",
                  R"(
span.query @q {
  %x = span.user "write"
  %g = span.gen %x {temperature = 0.7}
  %d = span.cross %x, %g
  %r = span.repeat %d {n = 4}
  %p = span.plus %r
  %j = span.gen %p
  span.yield %j
}
)");
}

TEST(PlusDistribute, DoesNotFireWhenNoGenConsumesThePlus) {
  const char *input = R"(
span.query @q {
  %x = span.user "write"
  %g = span.gen %x
  %y = span.user "more"
  %h = span.gen %y
  %p = span.plus %g, %h
  span.yield %p
}
)";
  EXPECT_REWRITES("plus-distribute", input, input);
}

TEST(PlusDistribute, DoesNotFireWithoutInnerGens) {
  const char *input = R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %p = span.plus %a, %b
  %g = span.gen %p
  span.yield %g
}
)";
  EXPECT_REWRITES("plus-distribute", input, input);
}

TEST(PlusDistribute, DoesNotWidenAReducedGen) {
  const char *input = R"(
span.query @q {
  %x = span.user "write"
  %g = span.gen %x
  %y = span.user "more"
  %h = span.gen %y
  %p = span.plus %g, %h
  %j = span.gen %p {reduce = 2}
  span.yield %j
}
)";
  EXPECT_REWRITES("plus-distribute", input, input);
}

TEST(PlusDistribute, DoesNotFireTwice) {
  const char *input = R"(
span.query @q {
  %x = span.user "write"
  %g = span.gen %x
  %y = span.user "more"
  %h = span.gen %y
  %p = span.plus %g, %h
  %j = span.gen %p
  span.yield %j
}
)";
  auto once = spanc::passes::testing::runPipeline(input, "plus-distribute");
  ASSERT_TRUE(once.ok);
  auto twice = spanc::passes::testing::runPipeline(
      input, "plus-distribute,plus-distribute");
  ASSERT_TRUE(twice.ok);
  EXPECT_EQ(once.ir, twice.ir);
  EXPECT_NE(once.ir, spanc::passes::testing::canonical(input));
}

} // namespace
