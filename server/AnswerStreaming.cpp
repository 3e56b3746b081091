//===- AnswerStreaming.cpp - Following a request's answer to its end ------===//

#include "server/AnswerStreaming.h"

#include "server/ApiError.h"
#include "server/ClientSocket.h"
#include "server/ServerSentEvents.h"

#include <httplib.h>

namespace spanc::server {

namespace {

/// The event that tells a streaming client a choice failed (its status
/// line was sent long ago).
std::string choiceFailed(size_t choice, const ChoiceResult &result) {
  return ApiError(500, "choice " + std::to_string(choice) +
                           " failed: " + result.error)
      .body();
}

} // namespace

void waitForAll(ResponseStream &stream, int clientSocket,
                llvm::function_ref<void(size_t, const std::string &)> onText) {
  ResponseStream::Update update;
  do {
    stream.take(update, kClientPollInterval);
    for (size_t choice = 0; choice < update.text.size(); ++choice)
      if (!update.text[choice].empty())
        onText(choice, update.text[choice]);
    if (!update.allDone && !stream.isCancelled() && clientClosed(clientSocket))
      stream.cancel();
  } while (!update.allDone);
}

bool streamOpenAi(OpenAiExecution &execution, httplib::DataSink &sink) {
  const OpenAiAnswer &answer = execution.answer;
  ResponseStream::Update update;
  while (true) {
    execution.stream->take(update, kClientPollInterval);
    for (size_t choice = 0; choice < update.text.size(); ++choice) {
      StopStringFilter &filter = execution.filters[choice];
      std::string text = filter.push(update.text[choice]);
      if (update.finished[choice])
        text += filter.finish();
      if (answer.endpoint == Endpoint::ChatCompletions &&
          !execution.sentRole[choice]) {
        execution.sentRole[choice] = true;
        if (!writeEvent(sink, openAiRoleChunk(answer, choice)))
          return false;
      }
      if (!text.empty() &&
          !writeEvent(sink, openAiTextChunk(answer, choice, text)))
        return false;
      if (update.finished[choice]) {
        const ChoiceResult &result = execution.stream->result(choice);
        if (!result.succeeded &&
            !writeEvent(sink, choiceFailed(choice, result)))
          return false;
        if (!writeEvent(sink, openAiFinishChunk(
                                  answer, choice,
                                  finishReasonName(result, filter.stopped()))))
          return false;
      }
    }
    if (update.allDone) {
      if (execution.includeUsage &&
          !writeEvent(sink,
                      openAiUsageChunk(
                          answer, openAiUsage(execution.promptTokens,
                                              *execution.stream, execution.n))))
        return false;
      return writeDone(sink);
    }
    // Nothing may be written for a while (the request waits for room, or
    // a stop string holds text back): the socket tells whether anyone
    // still reads.
    if (!sink.is_writable() || clientClosed(execution.clientSocket))
      return false;
  }
}

bool streamSpnl(SpnlExecution &execution, httplib::DataSink &sink) {
  ResponseStream::Update update;
  while (true) {
    execution.stream->take(update, kClientPollInterval);
    for (size_t choice = 0; choice < execution.choices.size(); ++choice) {
      plan::CallId call = execution.choices[choice];
      StopStringFilter &filter = execution.filters[choice];
      std::string text = filter.push(update.text[call]);
      if (update.finished[call])
        text += filter.finish();
      if (!text.empty() &&
          !writeEvent(sink, spnlChunk(execution.answer, choice, text, nullptr)))
        return false;
      if (!update.finished[call])
        continue;
      const ChoiceResult &result = execution.stream->result(call);
      if (!result.succeeded && !writeEvent(sink, choiceFailed(choice, result)))
        return false;
      if (!writeEvent(sink, spnlChunk(execution.answer, choice, "",
                                      finishReasonName(result))))
        return false;
    }
    if (update.allDone)
      return writeDone(sink);
    if (!sink.is_writable() || clientClosed(execution.clientSocket))
      return false;
  }
}

} // namespace spanc::server
