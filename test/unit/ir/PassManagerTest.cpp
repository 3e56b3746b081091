//===- PassManagerTest.cpp - Pass registration, pipelines, verification ---===//
//
// Registers three small test passes in this binary (the real passes are
// tested by their lit tests): one that rewrites, one that breaks the IR,
// one that fails with a located error.
//
//===----------------------------------------------------------------------===//

#include "passes/PassManager.h"
#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "ir/Parser.h"
#include "ir/Printer.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace spanc;

namespace {

/// Unwraps every single-operand cross (a typical match + rewrite).
class UnwrapCrossPass : public passes::Pass {
public:
  bool run(ir::Module &module, passes::PassContext &) override {
    for (auto &query : module.getQueries())
      for (ir::Op &op : llvm::make_early_inc_range(query->getOps()))
        if (llvm::isa<ir::CrossOp>(&op) && op.getNumOperands() == 1) {
          op.replaceAllUsesWith(op.getOperand(0));
          op.erase();
        }
    return true;
  }
};

/// Leaves a gen without operands: the verifier must catch it.
class BreakIRPass : public passes::Pass {
public:
  bool run(ir::Module &module, passes::PassContext &) override {
    for (auto &query : module.getQueries())
      for (ir::Op &op : query->getOps())
        if (llvm::isa<ir::GenOp>(&op))
          op.dropAllOperands();
    return true;
  }
};

/// Fails at the first retrieve, the way desugar-retrieve reports a corpus
/// that does not exist.
class FailAtRetrievePass : public passes::Pass {
public:
  bool run(ir::Module &module, passes::PassContext &context) override {
    for (auto &query : module.getQueries())
      for (ir::Op &op : query->getOps())
        if (llvm::isa<ir::RetrieveOp>(&op)) {
          context.getDiagnostics().error(op.getLoc(), "no such corpus");
          return false;
        }
    return true;
  }
};

passes::PassRegistration
    unwrapRegistration("test-unwrap-cross", "unwrap single-operand crosses",
                       [] { return std::make_unique<UnwrapCrossPass>(); });
passes::PassRegistration
    breakRegistration("test-break-ir", "drop the operands of every gen",
                      [] { return std::make_unique<BreakIRPass>(); });
passes::PassRegistration
    failRegistration("test-fail-at-retrieve", "fail at the first retrieve",
                     [] { return std::make_unique<FailAtRetrievePass>(); });

const char *kInput = R"(span.query @q {
  %0 = span.user "u"
  %1 = span.cross %0
  %2 = span.retrieve {corpus = "c", k = 1} query "x"
  %3 = span.plus %2
  %4 = span.cross %1, %3
  %5 = span.gen %4
  span.yield %5
}
)";

struct Harness {
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics{sourceMgr};
  std::string messages;
  passes::PassOptions options;
  passes::PassContext context{diagnostics, options};
  passes::PassManager manager{context};
  std::string dumps;
  llvm::raw_string_ostream dumpStream{dumps};

  Harness() {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diagnostic, void *out) {
          llvm::raw_string_ostream os(*static_cast<std::string *>(out));
          diagnostic.print(nullptr, os, /*ShowColors=*/false);
        },
        &messages);
    manager.setPrintStream(dumpStream);
  }
  std::unique_ptr<ir::Module> parse() {
    return ir::parseModuleString(kInput, "input.ir", diagnostics);
  }
};

} // namespace

TEST(PassManager, RunsPassesInOrderAndPrintsAfterTheOnesAsked) {
  Harness harness;
  auto module = harness.parse();
  ASSERT_TRUE(module);
  ASSERT_FALSE(bool(harness.manager.addPipeline(" test-unwrap-cross ,")));
  ASSERT_FALSE(bool(harness.manager.addPrintAfter("test-unwrap-cross")));
  EXPECT_EQ(harness.manager.getPassNames(),
            std::vector<std::string>{"test-unwrap-cross"});
  ASSERT_FALSE(bool(harness.manager.run(*module))) << harness.messages;
  std::string expected = R"(span.query @q {
  %0 = span.user "u"
  %1 = span.retrieve {corpus = "c", k = 1} query "x"
  %2 = span.plus %1
  %3 = span.cross %0, %2
  %4 = span.gen %3
  span.yield %4
}
)";
  EXPECT_EQ(ir::toString(*module), expected);
  harness.dumpStream.flush();
  EXPECT_EQ(harness.dumps,
            "// -----// IR Dump After test-unwrap-cross //----- //\n" +
                expected);
}

TEST(PassManager, NamesThePassThatLeftIllFormedIR) {
  Harness harness;
  auto module = harness.parse();
  ASSERT_TRUE(module);
  ASSERT_FALSE(
      bool(harness.manager.addPipeline("test-unwrap-cross,test-break-ir")));
  llvm::Error error = harness.manager.run(*module);
  ASSERT_TRUE(bool(error));
  EXPECT_EQ(llvm::toString(std::move(error)),
            "the IR is ill-formed after pass 'test-break-ir'");
  EXPECT_NE(harness.messages.find(
                "input.ir:7:3: error: 'span.gen' takes 1 operand, got 0"),
            std::string::npos)
      << harness.messages;
}

TEST(PassManager, VerifyingOnlyAtTheEndStillRejectsIllFormedIR) {
  Harness harness;
  auto module = harness.parse();
  ASSERT_TRUE(module);
  harness.manager.setVerifyEach(false);
  ASSERT_FALSE(
      bool(harness.manager.addPipeline("test-break-ir,test-unwrap-cross")));
  llvm::Error error = harness.manager.run(*module);
  ASSERT_TRUE(bool(error));
  EXPECT_EQ(llvm::toString(std::move(error)),
            "the IR is ill-formed after the pipeline (last pass "
            "'test-unwrap-cross'; verify after each pass to find the one "
            "that broke it)");
  EXPECT_NE(harness.messages.find("error: 'span.gen' takes 1 operand, got 0"),
            std::string::npos)
      << harness.messages;
}

TEST(PassManager, VerifyingOnlyAtTheEndAcceptsWellFormedIR) {
  Harness harness;
  auto module = harness.parse();
  ASSERT_TRUE(module);
  harness.manager.setVerifyEach(false);
  ASSERT_FALSE(bool(harness.manager.addPipeline("test-unwrap-cross")));
  ASSERT_FALSE(bool(harness.manager.run(*module))) << harness.messages;
  EXPECT_EQ(ir::toString(*module).find("span.cross %0\n"), std::string::npos);
}

TEST(PassManager, AFailingPassStopsThePipelineWithItsLocatedError) {
  Harness harness;
  auto module = harness.parse();
  ASSERT_TRUE(module);
  ASSERT_FALSE(bool(
      harness.manager.addPipeline("test-fail-at-retrieve,test-unwrap-cross")));
  llvm::Error error = harness.manager.run(*module);
  ASSERT_TRUE(bool(error));
  EXPECT_EQ(llvm::toString(std::move(error)),
            "pass 'test-fail-at-retrieve' failed");
  EXPECT_NE(harness.messages.find("input.ir:4:3: error: no such corpus"),
            std::string::npos)
      << harness.messages;
  // The second pass never ran: the single-operand cross is still there.
  EXPECT_NE(ir::toString(*module).find("span.cross %0\n"), std::string::npos);
}

TEST(PassManager, RejectsUnknownPassNames) {
  Harness harness;
  llvm::Error error = harness.manager.addPipeline("test-unwrap-cross,nosuch");
  ASSERT_TRUE(bool(error));
  std::string message = llvm::toString(std::move(error));
  EXPECT_NE(message.find("unknown pass 'nosuch' (registered: "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("test-unwrap-cross"), std::string::npos) << message;
  EXPECT_TRUE(bool(harness.manager.addPrintAfter("nosuch")));
  // The empty pipeline is valid and runs nothing.
  Harness empty;
  ASSERT_FALSE(bool(empty.manager.addPipeline("")));
  EXPECT_TRUE(empty.manager.getPassNames().empty());
}

TEST(PassManager, HelpListsTheDefaultPipelineThenTheRegisteredPasses) {
  ASSERT_FALSE(passes::defaultPipeline().empty());
  std::string help = passes::describePasses();
  std::string pipeline;
  for (const char *name : passes::defaultPipeline())
    pipeline += std::string(" ") + name;
  EXPECT_NE(help.find(pipeline + "\n\nPasses:\n"), std::string::npos) << help;
  EXPECT_NE(help.find("  test-unwrap-cross "), std::string::npos) << help;
}

TEST(PassManagerDeathTest, DefaultPipelineNeedsEveryPassLinked) {
  // This binary links no real pass: the pipeline cannot be built, and
  // saying so beats compiling every program without the pass.
  Harness harness;
  EXPECT_DEATH(harness.manager.addDefaultPipeline(),
               "of the default pipeline is not linked");
}
