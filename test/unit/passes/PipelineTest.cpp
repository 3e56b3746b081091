//===- PipelineTest.cpp - The default pipeline reaches a fixed point ------===//
//
// Rules are idempotent and confluent: running the default pipeline on its
// own output changes nothing. Checked on random well-formed queries built
// with every op the passes rewrite (all but retrieve, which needs a corpus
// and is covered by the lit tests).
//
//===----------------------------------------------------------------------===//

#include "test/unit/passes/PassTestUtils.h"

#include "ir/IR.h"
#include "ir/Verifier.h"

#include <random>

namespace {

using namespace spanc;

/// A random query: leaves, joins, gens (greedy and sampled, some with
/// reduce), chats and repeats over earlier values.
std::unique_ptr<ir::Module> randomModule(unsigned seed, unsigned queries,
                                         unsigned opsPerQuery) {
  std::mt19937 random(seed);
  auto module = std::make_unique<ir::Module>();
  const char *texts[] = {"a", "b", "c", ""};
  for (unsigned q = 0; q < queries; ++q) {
    ir::Query *query = module->addQuery("q" + std::to_string(q), {});
    ir::Builder builder(query);
    std::vector<ir::Op *> values;
    auto pick = [&] { return values[random() % values.size()]; };
    auto pickSome = [&](unsigned most) {
      std::vector<ir::Op *> some;
      unsigned count = random() % (most + 1);
      for (unsigned i = 0; i < count && !values.empty(); ++i)
        some.push_back(pick());
      return some;
    };
    for (unsigned i = 0; i < opsPerQuery; ++i) {
      unsigned choice = values.empty() ? 0 : random() % 9;
      const char *text = texts[random() % 4];
      ir::Op *op = nullptr;
      switch (choice) {
      case 0:
        op = builder.createFragment(text);
        break;
      case 1:
        op = random() % 2 ? builder.createUser(std::string("u") + text)
                          : builder.createSystem(std::string("s") + text);
        break;
      case 2:
      case 3: {
        // An empty span is an empty cross; a plus holds at least one.
        std::vector<ir::Op *> spans = pickSome(5);
        op =
            spans.empty() ? builder.createCross({}) : builder.createPlus(spans);
        break;
      }
      case 4:
        op = builder.createCross(pickSome(4));
        break;
      case 5:
      case 6: {
        llvm::SmallVector<ir::NamedAttribute, 2> options;
        options.push_back(
            {"temperature", ir::Attribute(random() % 2 ? 0.0 : 0.7)});
        if (random() % 4 == 0)
          options.push_back({"reduce", ir::Attribute(int64_t(2))});
        op = builder.createGen(pick(), options);
        break;
      }
      case 7:
        op = builder.createChat(pickSome(3),
                                {{"temperature", ir::Attribute(0.0)}});
        break;
      case 8:
        op = builder.createRepeat(pick(), 1 + random() % 5);
        break;
      }
      values.push_back(op);
    }
    builder.createYield(values.back());
  }
  return module;
}

std::string runDefault(ir::Module &module, const passes::PassOptions &options,
                       ir::DiagnosticEngine &diagnostics) {
  passes::PassContext context(diagnostics, options);
  passes::PassManager manager(context);
  manager.addDefaultPipeline();
  if (llvm::Error error = manager.run(module)) {
    ADD_FAILURE() << llvm::toString(std::move(error));
    return "";
  }
  return ir::toString(module);
}

TEST(DefaultPipeline, SecondRunChangesNothing) {
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  for (unsigned seed = 0; seed < 300; ++seed) {
    for (unsigned treeReduce : {0u, 2u, 3u}) {
      auto module = randomModule(seed, 1 + seed % 4, 5 + seed % 40);
      ASSERT_TRUE(ir::verify(*module, diagnostics)) << "seed " << seed;
      passes::PassOptions options;
      options.treeReduce = treeReduce;
      std::string once = runDefault(*module, options, diagnostics);
      std::string twice = runDefault(*module, options, diagnostics);
      ASSERT_EQ(once, twice)
          << "seed " << seed << ", --tree-reduce=" << treeReduce;
    }
  }
}

TEST(DefaultPipeline, ListsEveryPassOfThisIssueInOrder) {
  std::vector<std::string> names;
  for (const char *name : passes::defaultPipeline()) {
    names.push_back(name);
    EXPECT_NE(passes::lookupPass(name), nullptr) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"desugar-chat", "desugar-retrieve",
                                             "plus-simplify", "tree-reduce",
                                             "plus-distribute", "plus-simplify",
                                             "cse", "bulk-order"}));
}

} // namespace
