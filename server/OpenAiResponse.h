//===- OpenAiResponse.h - Chat and completion answers as OpenAI's ---------===//
//===//
//
// The bodies of /v1/chat/completions and /v1/completions: the whole answer
// (`chat.completion`, `text_completion`) and, streamed, its chunks (the
// data of each server-sent event, without the framing: ServerSentEvents.h).
// Plain values in, JSON text out: no network, no engine.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_OPENAIRESPONSE_H
#define SPANC_SERVER_OPENAIRESPONSE_H

#include "runtime/model/Tokenizer.h"
#include "server/CompletionRequest.h"
#include "server/ResponseJson.h"
#include "server/ResponseStream.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace spanc::server {

/// What every chunk of one answer repeats.
struct OpenAiAnswer {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string id;
  std::string model;
  int64_t created = 0;
};

/// A chat stream's first chunk of a choice: the role, as OpenAI's is.
std::string openAiRoleChunk(const OpenAiAnswer &answer, size_t choice);
/// A choice's next text.
std::string openAiTextChunk(const OpenAiAnswer &answer, size_t choice,
                            const std::string &text);
/// A choice's end.
std::string openAiFinishChunk(const OpenAiAnswer &answer, size_t choice,
                              const char *finishReason);
/// The last chunk with stream_options.include_usage: no choices, the usage.
std::string openAiUsageChunk(const OpenAiAnswer &answer,
                             const TokenUsage &usage);

/// One choice of a whole answer.
struct OpenAiChoice {
  std::string text;
  const char *finishReason = "stop";
  /// Logprobs asked for: the result whose tokens (those within `text`)
  /// are answered with their figures; null: `logprobs` is null.
  const ChoiceResult *logprobs = nullptr;
};

/// The whole answer: one choice each, then the usage.
std::string openAiWholeAnswer(const OpenAiAnswer &answer,
                              llvm::ArrayRef<OpenAiChoice> choices,
                              const TokenUsage &usage,
                              const model::Tokenizer &tokenizer);

/// The usage of a request with `n` choices per prompt: each prompt counts
/// once, with the cache hits its first choice found; every choice's output.
TokenUsage openAiUsage(llvm::ArrayRef<uint64_t> promptTokens,
                       const ResponseStream &stream, size_t n);

} // namespace spanc::server

#endif // SPANC_SERVER_OPENAIRESPONSE_H
