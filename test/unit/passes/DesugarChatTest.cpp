//===- DesugarChatTest.cpp - Tests of desugar-chat ------------------------===//

#include "test/unit/passes/PassTestUtils.h"

namespace {

TEST(DesugarChat, ChatBecomesGenOverCrossOfItsMessages) {
  EXPECT_REWRITES("desugar-chat", R"(
span.query @q {
  %s = span.system "be brief"
  %u = span.user "hi"
  %c = span.chat %s, %u {max_tokens = 8, temperature = 0.0}
  span.yield %c
}
)",
                  R"(
span.query @q {
  %s = span.system "be brief"
  %u = span.user "hi"
  %x = span.cross %s, %u
  %g = span.gen %x {max_tokens = 8, temperature = 0.0}
  span.yield %g
}
)");
}

TEST(DesugarChat, LeavesGensAlone) {
  const char *input = R"(
span.query @q {
  %u = span.user "hi"
  %g = span.gen %u {max_tokens = 8}
  span.yield %g
}
)";
  EXPECT_REWRITES("desugar-chat", input, input);
}

} // namespace
