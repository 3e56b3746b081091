//===- SpnlExecute.h - spnl's /v1/query/execute: its request and answers --===//
//
// spnl's client (its "spnl" backend) posts a query to /v1/query/execute as
// it does to a vLLM patched for spans: the spnl JSON as a text/plain body,
// `?stream=true|false` (false when max_tokens is 1, a cache warm-up), and
// reads the answers as OpenAI ones: streamed, server-sent events `data:
// {chunk}` whose choices carry the text of choice `index` (newer clients
// read completion chunks, `text`; older ones chat chunks, `delta.content`,
// and parse each HTTP chunk as one event); not streamed, one JSON body, a
// completion for a map bulk and a chat completion otherwise. The choices
// are the query's results that are model outputs, in order (a repeat's
// samples, a map's inputs, the one g). What is formatted here needs no
// network and no model.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_SPNLEXECUTE_H
#define SPANC_SERVER_SPNLEXECUTE_H

#include "plan/Plan.h"
#include "server/ResponseJson.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spanc::server {

/// `?stream=`: "true" or "false" (absent: false); anything else is a 400
/// naming the parameter.
llvm::Expected<bool> parseStreamParam(bool present, llvm::StringRef value);

/// Whether spnl reads the whole answer as a completion (a map bulk:
/// {"Map": ...}, {"map": ...}, or either under {"bulk": ...}) rather than
/// a chat completion.
bool readsAsCompletion(llvm::StringRef body);

/// The call behind each choice: the plan's results that are calls, in
/// order. A call may back several choices (temperature-0 samples of a
/// repeat are one call).
std::vector<plan::CallId> spnlChoices(const plan::Plan &plan);

struct SpnlAnswer {
  std::string id;
  std::string model;
  int64_t created = 0;
};

/// One streamed chunk (without the "data: " framing): choice `choice`'s
/// new `text`, or its end when `finishReason` is set. The choice carries
/// both `text` and `delta`, so completion and chat chunk readers alike
/// take it.
std::string spnlChunk(const SpnlAnswer &answer, size_t choice,
                      llvm::StringRef text, const char *finishReason);

/// The whole answer: a text_completion (`asCompletion`) or a
/// chat.completion with one choice per text.
std::string spnlWholeAnswer(const SpnlAnswer &answer, bool asCompletion,
                            llvm::ArrayRef<std::string> texts,
                            llvm::ArrayRef<const char *> finishReasons,
                            const TokenUsage &usage);

} // namespace spanc::server

#endif // SPANC_SERVER_SPNLEXECUTE_H
