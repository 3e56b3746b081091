//===- CompletionRequest.h - An OpenAI completion request, parsed ---------===//
//
// The body of POST /v1/chat/completions or /v1/completions as vLLM and
// llama.cpp accept it, read into plain values and checked against the
// server's limits: a malformed or out-of-range field is a 400 naming the
// field (param), a model none of the served names matches a 404
// (server/ModelNames.h). A field OpenAI defines that the server does not
// honour (tools, penalties, json response formats, echo, suffix, best_of,
// ...) is a 400 naming it unless it asks for the default, as vLLM answers
// what it lacks; fields it does not know are ignored, as vLLM does.
// max_completion_tokens, OpenAI's newer name for max_tokens, is taken on
// both endpoints and wins over max_tokens (both are checked), as vLLM
// reads `max_completion_tokens or max_tokens`. reasoning_effort (a string
// OpenAI defines, or null) is read and ignored: the models served have no
// reasoning mode to set, and clients such as spnl send it on every chat.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_COMPLETIONREQUEST_H
#define SPANC_SERVER_COMPLETIONREQUEST_H

#include "plan/MessageEncoder.h"
#include "server/ModelNames.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spanc::server {

enum class Endpoint { ChatCompletions, Completions };

struct ChatMessage {
  plan::MessageRole role = plan::MessageRole::User;
  std::string content;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  /// The served name the request's model matched (the primary one when it
  /// names none): what the answer's `model` says.
  std::string model;
  /// Chat: the conversation, through the model's chat template.
  std::vector<ChatMessage> messages;
  /// Completions: one or more raw prompts (each gets n choices).
  std::vector<std::string> prompts;
  /// Per prompt: its token ids when it was given as ids (OpenAI's and
  /// vLLM's token-id prompts: what a router that tokenized already, as
  /// NVIDIA Dynamo's frontend, sends), else empty and prompts[i] is text.
  std::vector<std::vector<int32_t>> promptTokens;
  int64_t maxTokens = 0;
  /// The field maxTokens came from ("max_tokens" or
  /// "max_completion_tokens"), so that later errors name what was sent.
  std::string maxTokensField = "max_tokens";
  double temperature = 1.0;
  double topP = 1.0;
  /// vLLM's top_k; 0: no limit.
  int64_t topK = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int64_t n = 1;
  bool stream = false;
  /// stream_options.include_usage: a last chunk with the usage.
  bool includeUsage = false;
  /// logit_bias: (token id, bias in [-100, 100]) added to the logits.
  std::vector<std::pair<int32_t, float>> logitBias;
  /// Each token's log probability and the top N others' (chat: logprobs
  /// true and top_logprobs N; completions: logprobs N); nullopt: none.
  std::optional<int64_t> logprobs;
};

/// The server's bounds on a request.
struct RequestLimits {
  /// The names of the one model served (its ids in /v1/models).
  ModelNames models;
  /// max_tokens above this is refused (--max-tokens-limit).
  int64_t maxTokensLimit = 4096;
  /// max_tokens when the request gives none.
  int64_t defaultMaxTokens = 256;
  /// Choices per prompt (n) and prompts per completions request.
  int64_t maxChoices = 16;
  int64_t maxPrompts = 64;
  /// Stop strings per request, as OpenAI allows.
  size_t maxStopStrings = 4;
  /// The model's vocabulary: logit_bias keys must be below it (0: any).
  int64_t vocabSize = 0;
  /// logit_bias entries per request, as OpenAI allows.
  size_t maxLogitBias = 300;
  /// top_logprobs (chat) and logprobs (completions) at most.
  int64_t maxTopLogprobs = 20;
};

/// Parses and checks `body`; an ApiError (400, 404) says what is wrong.
llvm::Expected<CompletionRequest>
parseCompletionRequest(llvm::StringRef body, Endpoint endpoint,
                       const RequestLimits &limits);

} // namespace spanc::server

#endif // SPANC_SERVER_COMPLETIONREQUEST_H
