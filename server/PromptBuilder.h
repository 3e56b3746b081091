//===- PromptBuilder.h - The model calls an OpenAI request makes ----------===//
//
// A chat request's messages go through the model's chat template one
// message at a time (plan::MessageEncoder, as codegen lowers a span query's
// messages), then the assistant header, so a chat and a span query with the
// same system message share its blocks. A completions prompt is the raw
// text (special tokens parsed, BOS where the model wants it). Each choice
// is one call; prompts past --max-prompt-tokens, the context or the whole
// KV cache, or past the context with their max_tokens, are refused (400)
// before anything is queued, each error naming the limit that applies; a
// max_tokens the KV cache cannot hold after the prompt is lowered to what
// it can.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_PROMPTBUILDER_H
#define SPANC_SERVER_PROMPTBUILDER_H

#include "plan/MessageEncoder.h"
#include "plan/Plan.h"
#include "runtime/model/Tokenizer.h"
#include "server/CompletionRequest.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::server {

struct PromptLimits {
  /// Prompt tokens a request's prompt may have (--max-prompt-tokens); 0:
  /// not set, the context bounds it.
  int64_t maxPromptTokens = 0;
  /// The model's context: prompt + max_tokens must fit. 0: no bound.
  int64_t contextLength = 0;
  /// The whole KV cache in tokens (--kv-cache): a prompt it cannot hold
  /// alone is refused, and max_tokens is lowered to what it can (the
  /// choice then ends with "length"). 0: no bound.
  int64_t kvCacheTokens = 0;
};

/// The calls of one request: prompt p's choice c is calls[p * n + c]; a
/// span query's plan, whose calls name each other by index.
struct RequestCalls {
  std::vector<plan::Call> calls;
  /// Prompt tokens of each prompt; empty: each call's, as admitted.
  std::vector<uint64_t> promptTokens;
};

llvm::Expected<RequestCalls> buildCalls(const CompletionRequest &request,
                                        const plan::MessageEncoder &encoder,
                                        const model::Tokenizer &tokenizer,
                                        const PromptLimits &limits);

} // namespace spanc::server

#endif // SPANC_SERVER_PROMPTBUILDER_H
