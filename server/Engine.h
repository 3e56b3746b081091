//===- Engine.h - The engine thread: one scheduler and cache for all ------===//
//
// spanc serve's one engine thread (docs/SERVING.md) owns
// the Executor (scheduler, model runner, KV cache) and runs one session
// whose plan grows with the requests: HTTP threads submit a request's
// calls to a queue; between steps the engine appends them to the plan
// (Executor::addCalls), so they join the next step's batch (continuous
// batching), cancels the calls of requests whose clients went away,
// streams each sampled piece to its request's ResponseStream and reports
// finished requests to it and to the metrics. When nothing is left the
// session starts over on an empty plan; the cache stays warm.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_ENGINE_H
#define SPANC_SERVER_ENGINE_H

#include "plan/Plan.h"
#include "runtime/sched/Executor.h"
#include "server/Metrics.h"
#include "server/PromptBuilder.h"
#include "server/ResponseStream.h"

#include "llvm/Support/Error.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace spanc::server {

class Engine {
public:
  /// Hooks run on the engine thread, which starts the OpenMP parallel
  /// regions (their thread count is per starting thread): `atStart` once,
  /// `afterStep` after every step (the CLI sets and adapts -t there).
  struct ThreadHooks {
    std::function<void()> atStart;
    std::function<void()> afterStep;
  };

  /// `maxRequests`: requests held at once, running or waiting; one more is
  /// refused (429). `maxSessionCalls`: once the session's plan holds this
  /// many calls, new requests wait until it drains and starts over, so
  /// memory stays bounded under a load that never pauses. `maxCalls`:
  /// model calls held at once, running or waiting (0: no bound); a request
  /// whose calls would pass it is refused (429), one that makes more
  /// calls than that 400.
  Engine(sched::Executor &executor, ServerMetrics &metrics, size_t maxRequests,
         ThreadHooks hooks = {}, size_t maxSessionCalls = 65536,
         size_t maxCalls = 0);
  ~Engine();

  void start();
  /// Queues a request's calls (RequestCalls::calls, prompt-major). Fails
  /// with an ApiError: 429 when the server holds maxRequests already, 503
  /// once it is shutting down.
  llvm::Expected<std::shared_ptr<ResponseStream>>
  submit(RequestCalls calls, Clock::time_point arrival);
  /// Stops taking requests, cancels the ones in flight (their streams
  /// finish with `reason`) and joins the engine thread.
  void shutdown(const std::string &reason);

  /// Requests submitted and not yet finished.
  size_t numInFlight() const;
  /// Their model calls.
  size_t numCallsInFlight() const;
  /// Whether shutdown() began (calls failing now were cancelled by it).
  bool isStopping() const;

private:
  struct Request;
  /// Which request and choice a call of the session serves.
  struct CallOwner {
    std::shared_ptr<Request> request;
    size_t choice = 0;
  };

  void loop();
  /// Takes the queued requests into the session's plan.
  void admitQueued(std::vector<std::shared_ptr<Request>> &queued);
  /// Reports the calls that finished; forgets the finished requests.
  void deliverFinished();
  void finishRequest(Request &request);
  void publishLoad();
  /// Ends the session and begins an empty one (nothing is in flight).
  void restartSession();

  sched::Executor &executor;
  ServerMetrics &metrics;
  const size_t maxRequests;
  const size_t maxSessionCalls;
  const size_t maxCalls;
  ThreadHooks hooks;

  // Shared with the HTTP threads.
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::vector<std::shared_ptr<Request>> queue;
  size_t inFlight = 0;
  size_t callsInFlight = 0;
  bool stopping = false;
  std::string stopReason;

  // The engine thread's own.
  std::thread thread;
  plan::Plan plan;
  std::vector<sched::CallOutcome> outcomes;
  std::vector<CallOwner> owners; ///< by CallId
  std::vector<plan::CallId> activeCalls;
  bool sessionOpen = false;
  /// The fairness tag of the next request taken in (sched::FairQueue).
  sched::RequestTag nextTag = 1;
};

} // namespace spanc::server

#endif // SPANC_SERVER_ENGINE_H
