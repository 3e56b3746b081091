//===- SpanQuery.cpp - A span program sent over the network, compiled -----===//

#include "server/SpanQuery.h"

#include "codegen/CompilePipeline.h"
#include "retrieval/CorpusCatalog.h"
#include "server/ApiError.h"
#include "support/FileAccess.h"

#include <algorithm>

namespace spanc::server {

llvm::Expected<plan::Plan>
compileSpanQuery(llvm::StringRef source, bool isJson,
                 llvm::ArrayRef<std::pair<std::string, std::string>> params,
                 const plan::MessageEncoder &encoder,
                 const SpanQueryLimits &limits) {
  codegen::CompileOptions options;
  // Nothing on this machine may be read on a network program's behalf:
  // no folder is allowed, not even the server's working folder.
  options.setReadPolicy(support::ReadPolicy());
  // Corpora by the names the server was given, never by path.
  static const std::unique_ptr<retrieval::CorpusCatalog> noCorpora =
      llvm::cantFail(retrieval::CorpusCatalog::open({}, {}));
  options.passes.corpora = limits.corpora ? limits.corpora : noCorpora.get();
  // spnl's max_tokens 0 (or none) is as many as the server allows: its
  // limit, as far as the context leaves room.
  if (isJson)
    options.limits.defaultMaxTokens = limits.maxTokensLimit;
  options.frontend.paramOverrides.assign(params.begin(), params.end());
  options.limits.maxCalls = limits.maxCalls;
  options.limits.contextLength = limits.contextLength;
  // Verifying once is enough for a program that is not being debugged.
  options.verifyEach = false;
  auto plan = codegen::compileToPlan(
      source, isJson ? "query.json" : "query.span", encoder, options);
  if (!plan)
    return apiError(400, "the program does not compile:\n" +
                             llvm::toString(plan.takeError()));
  if (plan->calls.empty())
    return apiError(400, "the program makes no model call");
  for (plan::Call &call : plan->calls) {
    std::string where = call.location.empty() ? "a gen" : call.location;
    // spnl JSON's "model" is required and routes spnl's client
    // ("spnl/NAME", "ollama/NAME"): the query reached the server it was
    // sent to. A .span gen names a model only to choose one.
    if (!isJson && !call.options.model.empty() &&
        !limits.models.match(call.options.model))
      return apiError(404,
                      where + ": the model '" + call.options.model +
                          "' does not exist; this server serves " +
                          limits.models.describe(),
                      "model");
    if (call.options.maxTokens > limits.maxTokensLimit)
      return apiError(
          400,
          where + ": max_tokens " + std::to_string(call.options.maxTokens) +
              " is over the server's limit of " +
              std::to_string(limits.maxTokensLimit) + " (--max-tokens-limit)",
          "max_tokens");
    uint64_t prompt = plan::knownPromptTokens(call);
    if (limits.maxPromptTokens > 0 && prompt > uint64_t(limits.maxPromptTokens))
      return apiError(400, where + ": the prompt has at least " +
                               std::to_string(prompt) +
                               " tokens, more than the server's limit of " +
                               std::to_string(limits.maxPromptTokens) +
                               " (--max-prompt-tokens)");
    if (limits.kvCacheTokens > 0 && prompt > uint64_t(limits.kvCacheTokens))
      return apiError(400, where + ": the prompt has at least " +
                               std::to_string(prompt) +
                               " tokens, more than the server's whole KV "
                               "cache of " +
                               std::to_string(limits.kvCacheTokens) +
                               " tokens (--kv-cache)");
    // As a chat's: what the cache holds after the known prompt, so a call
    // ends with "length" rather than failing when the cache runs out (an
    // output spliced in later may still not fit: the call then fails).
    if (limits.kvCacheTokens > 0 && call.options.maxTokens > 0)
      call.options.maxTokens = std::min(
          call.options.maxTokens,
          std::max<int64_t>(1, limits.kvCacheTokens - int64_t(prompt)));
  }
  return std::move(*plan);
}

} // namespace spanc::server
