//===- ResponseJson.h - What every endpoint's JSON answer shares ----------===//
//
// The pieces of an answer that the OpenAI endpoints, spnl's
// /v1/query/execute and span queries write alike (as llama.cpp's server
// keeps them in its utils): JSON text that survives invalid UTF-8, the one
// `usage` object, and a choice's finish reason by OpenAI's name.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_RESPONSEJSON_H
#define SPANC_SERVER_RESPONSEJSON_H

#include "runtime/sched/CallOutcome.h"
#include "server/ResponseStream.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace spanc::server {

/// JSON text; invalid UTF-8 from a byte-level token becomes U+FFFD
/// instead of an exception.
std::string dumpJson(const nlohmann::json &value);

/// The token counts an answer reports.
struct TokenUsage {
  uint64_t promptTokens = 0;
  uint64_t completionTokens = 0;
  /// Prompt tokens found in the KV cache.
  uint64_t cachedTokens = 0;

  /// Counts a call's prompt, its cache hits and its output.
  void addCall(const sched::CallStats &stats);
};

/// OpenAI's `usage`: {prompt_tokens, completion_tokens, total_tokens,
/// prompt_tokens_details: {cached_tokens}}.
nlohmann::json usageJson(const TokenUsage &usage);

/// "stop", "length" or "abort"; a stop string cut the text off
/// (`stoppedByString`) is a stop whatever the engine saw.
const char *finishReasonName(const ChoiceResult &result,
                             bool stoppedByString = false);

} // namespace spanc::server

#endif // SPANC_SERVER_RESPONSEJSON_H
