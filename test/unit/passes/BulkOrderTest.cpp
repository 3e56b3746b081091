//===- BulkOrderTest.cpp - Tests of bulk-order ----------------------------===//

#include "test/unit/passes/PassTestUtils.h"

#include "llvm/ADT/StringExtras.h"

#include <vector>

namespace {

using spanc::passes::testing::runPipeline;

/// A query that reads the given fragments under a +.
std::string query(const std::string &name,
                  const std::vector<std::string> &fragments) {
  std::string text = "span.query @" + name + " {\n";
  std::string operands;
  for (size_t i = 0; i < fragments.size(); ++i) {
    text += "  %f" + std::to_string(i) + " = span.fragment \"" + fragments[i] +
            "\"\n";
    operands += (i ? ", %f" : "%f") + std::to_string(i);
  }
  text += "  %p = span.plus " + operands + "\n";
  text += "  %g = span.gen %p\n  span.yield %g\n}\n";
  return text;
}

std::vector<std::string> queryOrder(llvm::StringRef ir) {
  std::vector<std::string> names;
  for (llvm::StringRef line : llvm::split(ir, '\n'))
    if (line.consume_front("span.query @"))
      names.push_back(line.take_until([](char c) { return c == ' '; }).str());
  return names;
}

TEST(BulkOrder, QueriesSharingFragmentsRunNextToEachOther) {
  std::string bulk = query("a", {"alpha", "beta"}) + query("b", {"gamma"}) +
                     query("c", {"delta"}) + query("d", {"beta", "epsilon"}) +
                     query("e", {"gamma", "delta"});
  auto result = runPipeline(bulk, "bulk-order");
  ASSERT_TRUE(result.ok) << result.diagnostics;
  // a shares beta with d; d shares nothing more, so the earliest left (b)
  // follows; b shares gamma with e; e shares delta with c.
  EXPECT_EQ(queryOrder(result.ir),
            (std::vector<std::string>{"a", "d", "b", "e", "c"}));
}

TEST(BulkOrder, MoreSharedBytesWin) {
  std::string bulk = query("a", {"short", "a much longer shared fragment"}) +
                     query("b", {"short"}) +
                     query("c", {"a much longer shared fragment"});
  auto result = runPipeline(bulk, "bulk-order");
  ASSERT_TRUE(result.ok);
  EXPECT_EQ(queryOrder(result.ir), (std::vector<std::string>{"a", "c", "b"}));
}

TEST(BulkOrder, KeepsTheOrderWhenNothingIsShared) {
  std::string bulk =
      query("z", {"one"}) + query("y", {"two"}) + query("x", {"three"});
  EXPECT_REWRITES("bulk-order", bulk, bulk);
}

TEST(BulkOrder, IsIdempotent) {
  std::string bulk = query("a", {"p", "q"}) + query("b", {"r"}) +
                     query("c", {"q", "r"}) + query("d", {"p"}) +
                     query("e", {"r", "p"}) + query("f", {"s"});
  auto once = runPipeline(bulk, "bulk-order");
  auto twice = runPipeline(bulk, "bulk-order,bulk-order");
  ASSERT_TRUE(once.ok && twice.ok);
  EXPECT_EQ(once.ir, twice.ir);
}

} // namespace
