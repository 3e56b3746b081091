//===- ModelSession.cpp - One model, its tokenizer and executors ----------===//

#include "bench/common/ModelSession.h"

#include "codegen/CompilePipeline.h"

#include "llvm/Support/Path.h"

#include <chrono>
#include <cmath>
#include <cstdio>

namespace spanc::bench {

llvm::Expected<std::unique_ptr<ModelSession>>
ModelSession::load(llvm::StringRef modelPath, backend::Device device,
                   model::ModelOptions modelOptions) {
  std::unique_ptr<ModelSession> session(new ModelSession());
  session->path = modelPath.str();
  session->device = device;
  modelOptions.hostWeights = device == backend::Device::Cpu;
  auto model = model::Model::load(modelPath, modelOptions);
  if (!model)
    return model.takeError();
  session->loadedModel = std::move(*model);
  auto tokenizer = model::Tokenizer::fromGguf(session->loadedModel->file());
  if (!tokenizer)
    return tokenizer.takeError();
  session->loadedTokenizer = std::move(*tokenizer);
  auto chatTemplate = model::ChatTemplate::fromGguf(
      session->loadedModel->file(), *session->loadedTokenizer);
  if (!chatTemplate)
    return chatTemplate.takeError();
  session->loadedTemplate = std::move(*chatTemplate);
  session->encoder = std::make_unique<model::ChatTemplateEncoder>(
      *session->loadedTemplate, *session->loadedTokenizer);
  return session;
}

llvm::Expected<std::unique_ptr<ModelSession>>
ModelSession::load(const BenchArgs &args) {
  model::ModelOptions options;
  options.gemmWeightCopy = args.gemmWeightCopy;
  options.quantizedPrompt = args.quantizedPrompt;
  return load(args.modelPath, args.device, options);
}

RunTotals &RunTotals::operator+=(const RunTotals &other) {
  calls += other.calls;
  promptTokens += other.promptTokens;
  computedTokens += other.computedTokens;
  reusedTokens += other.reusedTokens;
  generatedTokens += other.generatedTokens;
  spanTokens += other.spanTokens;
  repairedTokens += other.repairedTokens;
  probes += other.probes;
  probeSeconds += other.probeSeconds;
  seconds += other.seconds;
  return *this;
}

llvm::Expected<std::unique_ptr<sched::Executor>>
ModelSession::makeExecutor(const sched::ExecutorOptions &options) const {
  sched::ExecutorOptions onDevice = options;
  onDevice.device = device;
  return sched::Executor::create(*loadedModel, *loadedTokenizer, onDevice);
}

llvm::Expected<std::unique_ptr<sched::Executor>>
ModelSession::makeExecutor(kv::CacheMode cacheMode,
                           kv::RelocationMode relocation,
                           int64_t cacheTokens) const {
  sched::ExecutorOptions options;
  options.cacheMode = cacheMode;
  options.relocationMode = relocation;
  options.cacheTokens = cacheTokens;
  return makeExecutor(options);
}

llvm::Expected<plan::Plan>
ModelSession::compile(llvm::StringRef source, llvm::StringRef name,
                      const codegen::CompileOptions &options) const {
  return codegen::compileToPlan(source, name, *encoder, options);
}

llvm::Expected<plan::Plan>
ModelSession::compileSkipping(llvm::StringRef source,
                              llvm::ArrayRef<std::string> skipPasses) const {
  codegen::CompileOptions options;
  options.skipPasses.assign(skipPasses.begin(), skipPasses.end());
  return compile(source, "bench.span", options);
}

llvm::Expected<std::vector<sched::CallOutcome>>
ModelSession::run(sched::Executor &executor, const plan::Plan &plan,
                  RunTotals *totals) const {
  auto begin = std::chrono::steady_clock::now();
  std::vector<sched::CallOutcome> outcomes = executor.run(plan);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  if (outcomes.size() != plan.calls.size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the executor returned %zu outcomes for %zu calls", outcomes.size(),
        plan.calls.size());
  RunTotals run;
  run.seconds = seconds;
  for (size_t call = 0; call < outcomes.size(); ++call) {
    const sched::CallOutcome &outcome = outcomes[call];
    if (!outcome.succeeded)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "call %zu (%s, %s) failed: %s", call,
          plan.calls[call].query.c_str(), plan.calls[call].location.c_str(),
          outcome.error.c_str());
    ++run.calls;
    run.promptTokens += outcome.stats.promptTokens;
    run.computedTokens += outcome.stats.computedTokens;
    run.reusedTokens += outcome.stats.reusedTokens;
    run.generatedTokens += outcome.stats.generatedTokens;
    run.repairedTokens += outcome.stats.blendedTokens;
    run.probes += outcome.stats.probeTokens > 0;
    run.probeSeconds += outcome.stats.probeSeconds;
    for (const plan::PlanSegment &segment : plan.calls[call].segments)
      if (segment.kind == plan::SegmentKind::Span)
        for (const plan::Piece &piece : segment.pieces)
          run.spanTokens += piece.tokens.size();
  }
  if (totals)
    *totals += run;
  return outcomes;
}

llvm::Expected<std::map<std::string, std::string>>
ModelSession::answers(sched::Executor &executor, const plan::Plan &plan,
                      RunTotals *totals) const {
  auto outcomes = run(executor, plan, totals);
  if (!outcomes)
    return outcomes.takeError();
  std::map<std::string, std::string> answers;
  for (const plan::QueryPlan &query : plan.queries) {
    std::string &text = answers[query.name];
    for (const plan::ResultItem &item : query.results)
      if (item.call)
        text = outcomes->at(*item.call).text;
  }
  return answers;
}

std::string ModelSession::describeModel() const {
  const model::ModelConfig &config = loadedModel->config();
  return (llvm::sys::path::filename(path) + " (" +
          llvm::Twine(config.numLayers) + " layers, " +
          llvm::Twine(config.numHeads) + " query / " +
          llvm::Twine(config.numKvHeads) + " KV heads, context " +
          llvm::Twine(config.contextLength) + ")")
      .str();
}

std::string spanLiteral(llvm::StringRef text) {
  std::string literal = "\"";
  for (unsigned char c : text) {
    switch (c) {
    case '"':
      literal += "\\\"";
      break;
    case '\\':
      literal += "\\\\";
      break;
    case '\n':
      literal += "\\n";
      break;
    case '\r':
      literal += "\\r";
      break;
    case '\t':
      literal += "\\t";
      break;
    default:
      if (c < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(c));
        literal += escaped;
      } else
        literal += char(c);
    }
  }
  return literal + "\"";
}

std::string formatRatio(double numerator, double denominator) {
  if (numerator <= 0 || denominator <= 0)
    return "—";
  return printed("%.1f×", numerator / denominator);
}

std::string commandLine(const BenchArgs &args) {
  std::string text = args.quick ? " --quick" : "";
  if (args.repetitions > 0)
    text += " -r " + std::to_string(args.repetitions);
  for (const auto &[key, value] : args.settings)
    text += " --set " + key + "=" + value;
  return text;
}

std::pair<double, double> wilsonInterval(size_t successes, size_t trials) {
  if (trials == 0)
    return {0.0, 1.0};
  const double z = 1.959963984540054; // the 97.5% normal quantile
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
