//===- SpanQuery.h - A span program sent over the network, compiled -------===//
//
// POST /v1/query and /v1/query/execute carry a .span program or an spnl
// JSON query. Its author is not the machine's owner, so it compiles with a
// read policy that allows nothing: file("...") is refused, and retrieve
// (or spnl's augment) may name only a corpus the server was given with
// --corpus NAME=DIR (docs/ARCHITECTURE.md, "File access"); the plan is
// bounded by the server's limits (calls, max_tokens, prompt tokens,
// context, the KV cache) before anything is queued. A program that does
// not compile is a 400 with its diagnostics (file:line:col); a .span gen
// naming a model other than the one served is a 404, as a chat naming it
// is.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_SPANQUERY_H
#define SPANC_SERVER_SPANQUERY_H

#include "plan/MessageEncoder.h"
#include "plan/Plan.h"
#include "server/ModelNames.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <utility>

namespace spanc::retrieval {
class CorpusCatalog;
} // namespace spanc::retrieval

namespace spanc::server {

struct SpanQueryLimits {
  /// Model calls one program may make (its repeats' samples included).
  int64_t maxCalls = 256;
  /// Each call's max_tokens (--max-tokens-limit).
  int64_t maxTokensLimit = 4096;
  /// Each call's prompt as far as it is known before running.
  int64_t maxPromptTokens = 0;
  /// The model's context. 0: no bound.
  int64_t contextLength = 0;
  /// The whole KV cache in tokens: a call whose known prompt it cannot
  /// hold is refused, and a max_tokens past what it holds after the prompt
  /// lowered to that. 0: no bound.
  int64_t kvCacheTokens = 0;
  /// The names of the model served: a .span gen naming another is refused
  /// (404) as a chat naming it is (spnl JSON's model routes spnl's client
  /// and is taken as it is). Empty: any name is taken.
  ModelNames models;
  /// The corpora a program may retrieve from (--corpus); null: none.
  const retrieval::CorpusCatalog *corpora = nullptr;
};

/// Compiles `source` (spnl JSON when `isJson`, else .span) with the `param`
/// overrides (NAME, VALUE) through the model's chat template.
llvm::Expected<plan::Plan>
compileSpanQuery(llvm::StringRef source, bool isJson,
                 llvm::ArrayRef<std::pair<std::string, std::string>> params,
                 const plan::MessageEncoder &encoder,
                 const SpanQueryLimits &limits);

} // namespace spanc::server

#endif // SPANC_SERVER_SPANQUERY_H
