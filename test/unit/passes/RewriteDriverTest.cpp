//===- RewriteDriverTest.cpp - The greedy match/rewrite driver ------------===//

#include "passes/RewriteDriver.h"
#include "ir/Parser.h"
#include "ir/Printer.h"

#include "gtest/gtest.h"

#include "llvm/Support/SourceMgr.h"

namespace spanc::passes {
namespace {

/// Parses `text` (one query) for a test; fails the test if it cannot.
struct Parsed {
  explicit Parsed(llvm::StringRef text) : diagnostics(sourceMgr) {
    module = ir::parseModuleString(text, "test.ir", diagnostics);
    EXPECT_TRUE(module);
  }
  ir::Query &query() { return *module->getQueries().front(); }
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics;
  std::unique_ptr<ir::Module> module;
};

/// ⋈(x) -> x in every use: a rule whose rewrite makes it false.
struct UnwrapCross : RewritePattern {
  bool match(ir::Op &op) const override {
    return op.getKind() == ir::OpKind::Cross && op.getNumOperands() == 1 &&
           !op.useEmpty();
  }
  void rewrite(ir::Op &op, PatternRewriter &rewriter) const override {
    rewriter.replaceOp(&op, op.getOperand(0));
  }
};

/// Wraps every user in a new cross: it matches again what it wrote.
struct WrapUser : RewritePattern {
  bool match(ir::Op &op) const override {
    return op.getKind() == ir::OpKind::User;
  }
  void rewrite(ir::Op &op, PatternRewriter &rewriter) const override {
    rewriter.setInsertionPointAfter(&op);
    ir::Op *user = rewriter.createUser(op.getText());
    rewriter.replaceOp(&op, rewriter.createCross({user}));
  }
};

TEST(RewriteDriver, AppliesPatternsToAFixedPointAndCountsTheRewrites) {
  Parsed parsed(R"(span.query @q {
  %0 = span.user "a"
  %1 = span.cross %0
  %2 = span.cross %1
  %3 = span.cross %2
  span.yield %3
}
)");
  UnwrapCross unwrap;
  const RewritePattern *patterns[] = {&unwrap};
  llvm::Expected<size_t> rewrites =
      applyPatternsGreedily(parsed.query(), patterns);
  ASSERT_TRUE(bool(rewrites)) << llvm::toString(rewrites.takeError());
  // Program order: each cross is unwrapped once its operand already was.
  EXPECT_EQ(*rewrites, 3u);
  EXPECT_EQ(ir::toString(*parsed.module), "span.query @q {\n"
                                          "  %0 = span.user \"a\"\n"
                                          "  span.yield %0\n"
                                          "}\n");
}

TEST(RewriteDriver, ErasesWhatRewritesLeftUnusedButNotWhatWasUnusedBefore) {
  Parsed parsed(R"(span.query @q {
  %0 = span.user "kept although unused"
  %1 = span.user "a"
  %2 = span.cross %1
  span.yield %2
}
)");
  UnwrapCross unwrap;
  const RewritePattern *patterns[] = {&unwrap};
  ASSERT_EQ(*applyPatternsGreedily(parsed.query(), patterns), 1u);
  EXPECT_EQ(ir::toString(*parsed.module),
            "span.query @q {\n"
            "  %0 = span.user \"kept although unused\"\n"
            "  %1 = span.user \"a\"\n"
            "  span.yield %1\n"
            "}\n");
}

TEST(RewriteDriver, NoMatchIsZeroRewritesAndNoChange) {
  const char *text = "span.query @q {\n"
                     "  %0 = span.user \"a\"\n"
                     "  %1 = span.cross %0, %0\n"
                     "  span.yield %1\n"
                     "}\n";
  Parsed parsed(text);
  UnwrapCross unwrap;
  const RewritePattern *patterns[] = {&unwrap};
  EXPECT_EQ(*applyPatternsGreedily(parsed.query(), patterns), 0u);
  EXPECT_EQ(ir::toString(*parsed.module), text);
}

TEST(RewriteDriver, PatternsThatNeverSettleAreAnErrorNotAHang) {
  Parsed parsed(R"(span.query @q {
  %0 = span.user "a"
  span.yield %0
}
)");
  WrapUser wrap;
  const RewritePattern *patterns[] = {&wrap};
  llvm::Expected<size_t> rewrites =
      applyPatternsGreedily(parsed.query(), patterns);
  ASSERT_FALSE(bool(rewrites));
  EXPECT_NE(llvm::toString(rewrites.takeError())
                .find("the rewrites of query '@q' did not settle after 1000 "
                      "sweeps"),
            std::string::npos);
}

} // namespace
} // namespace spanc::passes
