//===- AnswerStreaming.h - Following a request's answer to its end --------===//
//
// Once a request is submitted, its HTTP thread follows the ResponseStream
// the engine fills (docs/SERVING.md): it waits for every
// choice (a whole answer), or writes each piece as a server-sent event as it
// comes (OpenAI's chunks or spnl's). Meanwhile it polls the client's socket:
// a client that goes away cancels the request, and its calls then finish
// failed at the engine's next step.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_ANSWERSTREAMING_H
#define SPANC_SERVER_ANSWERSTREAMING_H

#include "plan/Plan.h"
#include "server/OpenAiResponse.h"
#include "server/ResponseStream.h"
#include "server/SpnlExecute.h"
#include "server/StopStringFilter.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
class DataSink;
} // namespace httplib

namespace spanc::server {

/// How often a waiting HTTP thread looks at its client's socket: a client
/// gone is noticed within this.
constexpr std::chrono::milliseconds kClientPollInterval(50);

/// Waits until every choice of `stream` finished, handing on the text of
/// each as it comes; a client that goes away meanwhile cancels the request
/// (`clientSocket` -1: never polled).
void waitForAll(ResponseStream &stream, int clientSocket,
                llvm::function_ref<void(size_t, const std::string &)> onText);

/// A chat or completion request in flight.
struct OpenAiExecution {
  OpenAiAnswer answer;
  /// The prompt of each of the request's prompts, in tokens; `n` choices
  /// each (for the usage).
  std::vector<uint64_t> promptTokens;
  size_t n = 1;
  bool includeUsage = false;
  std::shared_ptr<ResponseStream> stream;
  /// Per choice: the request's stop strings.
  std::vector<StopStringFilter> filters;
  /// Per choice: a chat stream's first chunk (the role) was sent.
  std::vector<bool> sentRole;
  /// The connection's socket, polled for the client going away (-1: not
  /// found, never polled).
  int clientSocket = -1;
};

/// Streams the answer as OpenAI's chunks; false when the client is gone
/// (the request is then cancelled by the releaser).
bool streamOpenAi(OpenAiExecution &execution, httplib::DataSink &sink);

/// A /v1/query/execute request in flight: the call behind each of spnl's
/// choices, and what its answer says besides the text.
struct SpnlExecution {
  SpnlAnswer answer;
  std::vector<plan::CallId> choices;
  /// Per choice: text held back while it ends inside a UTF-8 character
  /// (byte-level tokens split them), released with the next piece.
  std::vector<StopStringFilter> filters;
  std::shared_ptr<ResponseStream> stream;
  /// The connection's socket, polled for the client going away.
  int clientSocket = -1;
};

/// Streams spnl's choices as completion chunks; false when the client is
/// gone.
bool streamSpnl(SpnlExecution &execution, httplib::DataSink &sink);

} // namespace spanc::server

#endif // SPANC_SERVER_ANSWERSTREAMING_H
