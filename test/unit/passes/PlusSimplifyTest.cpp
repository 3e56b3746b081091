//===- PlusSimplifyTest.cpp - Tests of plus-simplify ----------------------===//

#include "test/unit/passes/PassTestUtils.h"

namespace {

TEST(PlusSimplify, FlattensPlusInPlusAndCrossInCross) {
  EXPECT_REWRITES("plus-simplify", R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %c = span.fragment "c"
  %inner = span.plus %b, %c
  %outer = span.plus %a, %inner
  %s = span.system "s"
  %u = span.user "u"
  %x1 = span.cross %outer, %u
  %x2 = span.cross %s, %x1
  %g = span.gen %x2
  span.yield %g
}
)",
                  R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %c = span.fragment "c"
  %outer = span.plus %a, %b, %c
  %s = span.system "s"
  %u = span.user "u"
  %x2 = span.cross %s, %outer, %u
  %g = span.gen %x2
  span.yield %g
}
)");
}

TEST(PlusSimplify, DropsEmptySpansFromJoins) {
  EXPECT_REWRITES("plus-simplify", R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %empty = span.fragment ""
  %none = span.cross
  %p = span.plus %a, %empty, %none, %b
  %s = span.system "s"
  %x = span.cross %s, %none, %p
  %g = span.gen %x
  span.yield %g
}
)",
                  R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %p = span.plus %a, %b
  %s = span.system "s"
  %x = span.cross %s, %p
  %g = span.gen %x
  span.yield %g
}
)");
}

TEST(PlusSimplify, UnwrapsSingletonsWhereNothingPrecedesThem) {
  // ⋈(x) is x anywhere; +(x) is x as a gen's input and as the result.
  EXPECT_REWRITES("plus-simplify", R"(
span.query @q {
  %u = span.user "u"
  %x = span.cross %u
  %p = span.plus %x
  %g = span.gen %p
  %r = span.plus %g
  span.yield %r
}
)",
                  R"(
span.query @q {
  %u = span.user "u"
  %g = span.gen %u
  span.yield %g
}
)");
}

TEST(PlusSimplify, KeepsASingletonPlusInsideACross) {
  // There the + says the fragment does not attend to the system prompt.
  const char *input = R"(
span.query @q {
  %s = span.system "s"
  %f = span.fragment "f"
  %p = span.plus %f
  %u = span.user "u"
  %x = span.cross %s, %p, %u
  %g = span.gen %x
  span.yield %g
}
)";
  EXPECT_REWRITES("plus-simplify", input, input);
}

TEST(PlusSimplify, LeavesSeqParAndUnrelatedOpsAlone) {
  const char *input = R"(
span.query @q {
  %a = span.user "a"
  %b = span.user "b"
  %inner = span.seq %a, %b
  %outer = span.seq %inner
  %par = span.par %outer
  %unused = span.plus %a, %b
  span.yield %par
}
)";
  EXPECT_REWRITES("plus-simplify", input, input);
}

TEST(PlusSimplify, EmptiesCascadeUpToTheGen) {
  // The plus left with no span becomes an empty cross: the IR has no plus
  // of nothing.
  EXPECT_REWRITES("plus-simplify", R"(
span.query @q {
  %e = span.fragment ""
  %f = span.cross %e
  %p = span.plus %f, %e
  %g = span.gen %p
  span.yield %g
}
)",
                  R"(
span.query @q {
  %p = span.cross
  %g = span.gen %p
  span.yield %g
}
)");
}

TEST(PlusSimplify, SharedInnerJoinIsFlattenedAndKeptForItsOtherUser) {
  EXPECT_REWRITES("plus-simplify", R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %inner = span.plus %a, %b
  %g1 = span.gen %inner
  %outer = span.plus %inner, %g1
  %g2 = span.gen %outer
  span.yield %g2
}
)",
                  R"(
span.query @q {
  %a = span.fragment "a"
  %b = span.fragment "b"
  %inner = span.plus %a, %b
  %g1 = span.gen %inner
  %outer = span.plus %a, %b, %g1
  %g2 = span.gen %outer
  span.yield %g2
}
)");
}

} // namespace
