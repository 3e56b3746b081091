//===- ResponseJson.cpp - What every endpoint's JSON answer shares --------===//

#include "server/ResponseJson.h"

namespace spanc::server {

using nlohmann::json;

std::string dumpJson(const json &value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void TokenUsage::addCall(const sched::CallStats &stats) {
  promptTokens += stats.promptTokens;
  completionTokens += stats.generatedTokens;
  cachedTokens += stats.reusedTokens;
}

json usageJson(const TokenUsage &usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cachedTokens}}}};
}

const char *finishReasonName(const ChoiceResult &result, bool stoppedByString) {
  if (stoppedByString)
    return "stop";
  switch (result.reason) {
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  case FinishReason::Abort:
    return "abort";
  }
  return "stop";
}

} // namespace spanc::server
