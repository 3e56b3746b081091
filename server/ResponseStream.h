//===- ResponseStream.h - One request's results, engine to HTTP thread ----===//
//
// What passes between the engine thread and the HTTP thread serving one
// request (docs/SERVING.md): the engine appends each
// choice's generated text as it is sampled and finally its result; the
// HTTP thread waits for news and takes it, and cancels the request when
// its client goes away. Guarded by one mutex; the HTTP thread never
// touches the scheduler.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_RESPONSESTREAM_H
#define SPANC_SERVER_RESPONSESTREAM_H

#include "runtime/sched/CallOutcome.h"
#include "server/Metrics.h"

#include "llvm/ADT/StringRef.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace spanc::server {

using Clock = std::chrono::steady_clock;

/// How one choice ended.
struct ChoiceResult {
  bool succeeded = false;
  std::string error;
  FinishReason reason = FinishReason::Stop;
  sched::CallStats stats;
  /// With GenOptions::logprobs: the tokens generated and their figures.
  std::vector<plan::TokenId> tokens;
  std::vector<sched::TokenLogprobs> logprobs;
};

class ResponseStream {
public:
  ResponseStream(size_t numChoices, Clock::time_point arrival);

  // The engine thread.
  void appendText(size_t choice, llvm::StringRef piece);
  void finishChoice(size_t choice, ChoiceResult result);

  /// What happened since the last take().
  struct Update {
    /// Per choice: text generated since.
    std::vector<std::string> text;
    /// Per choice: it finished since (its result() is final).
    std::vector<bool> finished;
    bool allDone = false;
  };
  /// Waits at most `timeout` for news, then takes it (possibly none).
  void take(Update &update, std::chrono::milliseconds timeout);
  const ChoiceResult &result(size_t choice) const;
  size_t numChoices() const { return choices.size(); }

  /// The client went away: the engine cancels the calls left.
  void cancel() { cancelled = true; }
  bool isCancelled() const { return cancelled; }

  Clock::time_point arrival() const { return arrivedAt; }
  /// When the first text of any choice came (arrival when none did).
  Clock::time_point firstToken() const;
  /// The gaps between consecutive pieces of each choice, in seconds
  /// (vllm:inter_token_latency_seconds); taken once.
  std::vector<double> takeInterTokenGaps();

private:
  struct Choice {
    std::string unread;
    bool hasPiece = false;
    Clock::time_point lastPiece;
    bool done = false;
    bool reported = false;
    ChoiceResult result;
  };
  mutable std::mutex mutex;
  std::condition_variable news;
  std::vector<Choice> choices;
  size_t numDone = 0;
  std::vector<double> interTokenGaps;
  bool hasFirstToken = false;
  Clock::time_point arrivedAt, firstTokenAt;
  std::atomic<bool> cancelled{false};
};

} // namespace spanc::server

#endif // SPANC_SERVER_RESPONSESTREAM_H
