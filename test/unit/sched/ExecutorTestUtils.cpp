//===- ExecutorTestUtils.cpp - Models, plans and answers for executor tests //

#include "test/unit/sched/ExecutorTestUtils.h"

#include "codegen/Lowering.h"
#include "frontend/Load.h"
#include "passes/PassManager.h"
#include "runtime/model/ChatTemplateEncoder.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

namespace spanc::sched {

const char kPoolAndRopeDocuments[] = R"(
let pool = """The block pool owns every block of the KV cache. Each block has a
reference count. When the pool is full it evicts the least recently used
block that no request references, and a request that cannot fit waits until
another one finishes. A full cache never corrupts a running request."""
let rope = """Rotary position embeddings rotate every key by an angle that
grows with its position. A cached span computed at position zero can be
reused at another offset by rotating its keys by the difference, which is
what ReRoPE does, or by storing keys unrotated and rotating them inside the
attention kernel.""")";

std::string testModelPath(const std::string &path, bool installed) {
  const char *root = std::getenv("SPANC_ROOT");
  return installed ? std::string(root ? root : ".") + "/" + path : path;
}

llvm::Expected<std::unique_ptr<LoadedModel>>
loadChatModel(const std::string &path, const model::ModelOptions &options) {
  auto result = std::make_unique<LoadedModel>();
  auto model = model::Model::load(path, options);
  if (!model)
    return model.takeError();
  result->model = std::move(*model);
  auto tokens = model::Tokenizer::fromGguf(result->model->file());
  if (!tokens)
    return tokens.takeError();
  result->tokenizer = std::move(*tokens);
  auto chat =
      model::ChatTemplate::fromGguf(result->model->file(), *result->tokenizer);
  if (!chat)
    return chat.takeError();
  result->chatTemplate =
      std::make_unique<model::ChatTemplate>(std::move(*chat));
  return result;
}

std::unique_ptr<Executor> createExecutor(const LoadedModel &loaded,
                                         const ExecutorOptions &options) {
  auto executor = Executor::create(*loaded.model, *loaded.tokenizer, options);
  EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  return executor ? std::move(*executor) : nullptr;
}

plan::Plan compilePlan(const std::string &source, const LoadedModel &loaded) {
  llvm::SmallString<128> path;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("executor", "span", path));
  {
    std::error_code error;
    llvm::raw_fd_ostream out(path, error);
    out << source;
  }
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  std::unique_ptr<ir::Module> module = frontend::loadModule(path, diagnostics);
  llvm::sys::fs::remove(path);
  EXPECT_TRUE(module) << source;
  if (!module)
    return plan::Plan();
  passes::PassOptions passOptions;
  passes::PassContext context(diagnostics, passOptions);
  passes::PassManager manager(context);
  manager.addDefaultPipeline();
  EXPECT_FALSE(bool(manager.run(*module)));
  model::ChatTemplateEncoder encoder(*loaded.chatTemplate, *loaded.tokenizer);
  std::optional<plan::Plan> plan =
      codegen::lowerToPlan(*module, encoder, diagnostics);
  EXPECT_TRUE(plan.has_value());
  return plan ? std::move(*plan) : plan::Plan();
}

Answers answers(const plan::Plan &plan,
                const std::vector<CallOutcome> &outcomes) {
  Answers result;
  for (const plan::QueryPlan &query : plan.queries)
    for (const plan::ResultItem &item : query.results)
      if (item.call) {
        EXPECT_TRUE(outcomes[*item.call].succeeded)
            << query.name << ": " << outcomes[*item.call].error;
        std::vector<kv::TokenId> &tokens = result[query.name];
        tokens.insert(tokens.end(), outcomes[*item.call].tokens.begin(),
                      outcomes[*item.call].tokens.end());
      }
  return result;
}

uint32_t reusedTokens(const std::vector<CallOutcome> &outcomes) {
  uint32_t total = 0;
  for (const CallOutcome &outcome : outcomes)
    total += outcome.stats.reusedTokens;
  return total;
}

} // namespace spanc::sched
