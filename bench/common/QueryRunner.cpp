//===- QueryRunner.cpp - A model loaded once, span programs run on it -----===//

#include "bench/common/QueryRunner.h"

#include "llvm/Support/Path.h"

#include <chrono>
#include <cmath>

namespace spanc::bench {

RunTotals &RunTotals::operator+=(const RunTotals &other) {
  calls += other.calls;
  promptTokens += other.promptTokens;
  computedTokens += other.computedTokens;
  reusedTokens += other.reusedTokens;
  generatedTokens += other.generatedTokens;
  seconds += other.seconds;
  return *this;
}

llvm::Expected<std::unique_ptr<QueryRunner>>
QueryRunner::load(llvm::StringRef modelPath) {
  std::unique_ptr<QueryRunner> runner(new QueryRunner());
  runner->modelPath = modelPath.str();
  auto model = model::Model::load(modelPath);
  if (!model)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "cannot load '%s': %s",
        modelPath.str().c_str(), llvm::toString(model.takeError()).c_str());
  runner->modelPtr = std::move(*model);
  auto tokenizer = model::Tokenizer::fromGguf(runner->modelPtr->file());
  if (!tokenizer)
    return tokenizer.takeError();
  runner->tokenizerPtr = std::move(*tokenizer);
  auto chatTemplate = model::ChatTemplate::fromGguf(runner->modelPtr->file(),
                                                    *runner->tokenizerPtr);
  if (!chatTemplate)
    return chatTemplate.takeError();
  runner->chatTemplatePtr =
      std::make_unique<model::ChatTemplate>(std::move(*chatTemplate));
  runner->encoderPtr = std::make_unique<codegen::ChatTemplateEncoder>(
      *runner->chatTemplatePtr, *runner->tokenizerPtr);
  return runner;
}

std::string QueryRunner::describeModel() const {
  const model::ModelConfig &config = modelPtr->config();
  return llvm::sys::path::filename(modelPath).str() + " (" +
         std::to_string(config.numLayers) + " layers, " +
         std::to_string(config.numHeads) + " query / " +
         std::to_string(config.numKvHeads) + " KV heads, context " +
         std::to_string(config.contextLength) + ")";
}

llvm::Expected<std::unique_ptr<sched::Executor>>
QueryRunner::makeExecutor(const sched::ExecutorOptions &options) const {
  return sched::Executor::create(*modelPtr, *tokenizerPtr, options);
}

llvm::Expected<codegen::Plan>
QueryRunner::compile(llvm::StringRef source, llvm::StringRef name,
                     const codegen::CompileOptions &options) const {
  return codegen::compileToPlan(source, name, *encoderPtr, options);
}

llvm::Expected<std::map<std::string, std::string>>
QueryRunner::run(sched::Executor &executor, const codegen::Plan &plan,
                 RunTotals *totals) const {
  auto begin = std::chrono::steady_clock::now();
  std::vector<sched::CallOutcome> outcomes = executor.run(plan);
  auto end = std::chrono::steady_clock::now();
  if (outcomes.size() != plan.calls.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the executor returned %zu outcomes for "
                                   "%zu calls",
                                   outcomes.size(), plan.calls.size());
  RunTotals run;
  run.seconds = std::chrono::duration<double>(end - begin).count();
  for (size_t id = 0; id < outcomes.size(); ++id) {
    const sched::CallOutcome &outcome = outcomes[id];
    if (!outcome.succeeded)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "call %zu (%s, %s) failed: %s", id,
          plan.calls[id].query.c_str(), plan.calls[id].location.c_str(),
          outcome.error.c_str());
    ++run.calls;
    run.promptTokens += outcome.stats.promptTokens;
    run.computedTokens += outcome.stats.computedTokens;
    run.reusedTokens += outcome.stats.reusedTokens;
    run.generatedTokens += outcome.stats.generatedTokens;
  }
  if (totals)
    *totals += run;

  std::map<std::string, std::string> answers;
  for (const codegen::QueryPlan &query : plan.queries) {
    std::string &text = answers[query.name];
    for (const codegen::ResultItem &item : query.results)
      if (item.call)
        text = outcomes.at(*item.call).text;
  }
  return answers;
}

std::pair<double, double> wilsonInterval(size_t successes, size_t trials) {
  if (trials == 0)
    return {0.0, 1.0};
  const double z = 1.959963984540054;
  double n = double(trials), p = double(successes) / n;
  double denominator = 1 + z * z / n;
  double center = (p + z * z / (2 * n)) / denominator;
  double half =
      z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

bool containsIgnoringCase(llvm::StringRef haystack, llvm::StringRef needle) {
  return haystack.find_insensitive(needle) != llvm::StringRef::npos;
}

} // namespace spanc::bench
