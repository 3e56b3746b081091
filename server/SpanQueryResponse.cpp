//===- SpanQueryResponse.cpp - The answer to POST /v1/query ---------------===//

#include "server/SpanQueryResponse.h"

#include "server/ResponseJson.h"

namespace spanc::server {

using nlohmann::json;

namespace {

json callJson(const plan::Call &call, const ChoiceResult &result) {
  const sched::CallStats &stats = result.stats;
  return {{"id", call.id},
          {"query", call.query},
          {"location", call.location},
          {"cache_only", call.cacheOnly},
          {"succeeded", result.succeeded},
          {"error", result.error},
          {"finish_reason", finishReasonName(result)},
          {"prompt_tokens", stats.promptTokens},
          {"reused_tokens", stats.reusedTokens},
          {"computed_tokens", stats.computedTokens},
          {"relocated_tokens", stats.relocatedTokens},
          {"generated_tokens", stats.generatedTokens},
          {"preemptions", stats.preemptions},
          {"queued_seconds", stats.queuedSeconds},
          {"ttft_seconds", stats.ttftSeconds},
          {"total_seconds", stats.totalSeconds}};
}

} // namespace

std::string spanQueryAnswer(const plan::Plan &plan,
                            llvm::ArrayRef<std::string> texts,
                            const ResponseStream &stream,
                            const std::string &modelName) {
  json queries = json::array();
  for (const plan::QueryPlan &query : plan.queries) {
    json results = json::array();
    for (const plan::ResultItem &item : query.results) {
      if (!item.call) {
        results.push_back({{"text", item.text}});
        continue;
      }
      json answer = {{"call", *item.call}, {"text", texts[*item.call]}};
      const ChoiceResult &result = stream.result(*item.call);
      if (!result.succeeded)
        answer["error"] = result.error;
      results.push_back(answer);
    }
    queries.push_back({{"name", query.name}, {"results", results}});
  }
  json calls = json::array();
  TokenUsage usage;
  for (const plan::Call &call : plan.calls) {
    const ChoiceResult &result = stream.result(call.id);
    usage.addCall(result.stats);
    calls.push_back(callJson(call, result));
  }
  return dumpJson({{"object", "span.query"},
                   {"model", modelName},
                   {"queries", queries},
                   {"calls", calls},
                   {"usage", usageJson(usage)}});
}

} // namespace spanc::server
