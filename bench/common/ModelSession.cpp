//===- ModelSession.cpp - One model, its tokenizer and executors ----------===//

#include "bench/rag/ModelSession.h"

#include "codegen/CompilePipeline.h"

#include "llvm/Support/Path.h"

#include <cstdio>

namespace spanc::bench {

llvm::Expected<std::unique_ptr<ModelSession>>
ModelSession::load(llvm::StringRef modelPath) {
  std::unique_ptr<ModelSession> session(new ModelSession());
  session->path = modelPath.str();
  auto model = model::Model::load(modelPath);
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
  session->encoder = std::make_unique<codegen::ChatTemplateEncoder>(
      *session->loadedTemplate, *session->loadedTokenizer);
  return session;
}

llvm::Expected<std::unique_ptr<sched::Executor>>
ModelSession::makeExecutor(kv::CacheMode cacheMode,
                           kv::RelocationMode relocation,
                           int64_t cacheTokens) const {
  sched::ExecutorOptions options;
  options.cacheMode = cacheMode;
  options.relocationMode = relocation;
  options.cacheTokens = cacheTokens;
  return sched::Executor::create(*loadedModel, *loadedTokenizer, options);
}

llvm::Expected<codegen::Plan>
ModelSession::compile(llvm::StringRef source,
                      llvm::ArrayRef<std::string> skipPasses,
                      llvm::StringRef name) const {
  codegen::CompileOptions options;
  options.skipPasses.assign(skipPasses.begin(), skipPasses.end());
  return codegen::compileToPlan(source, name, *encoder, options);
}

llvm::Expected<std::vector<sched::CallOutcome>>
ModelSession::run(sched::Executor &executor, const codegen::Plan &plan) const {
  std::vector<sched::CallOutcome> outcomes = executor.run(plan);
  for (size_t call = 0; call < outcomes.size(); ++call)
    if (!outcomes[call].succeeded)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "call %zu (%s) failed: %s", call,
          plan.calls[call].location.c_str(), outcomes[call].error.c_str());
  return outcomes;
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

const char *relocationName(kv::RelocationMode mode) {
  return mode == kv::RelocationMode::Rerope ? "rerope" : "rope-in-kernel";
}

} // namespace spanc::bench
