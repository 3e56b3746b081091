//===- Engine.cpp - The engine thread: one scheduler and cache for all ----===//

#include "server/Engine.h"

#include "server/ApiError.h"

#include "llvm/ADT/STLExtras.h"

namespace spanc::server {

/// A submitted request as the engine tracks it.
struct Engine::Request {
  RequestCalls calls;
  std::shared_ptr<ResponseStream> stream;
  size_t choicesLeft = 0;
  /// Its calls, counted in Engine::callsInFlight until it finishes.
  size_t numCalls = 0;
  bool cancelRequested = false;
  FinishedRequest figures;
};

namespace {

double secondsBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

FinishReason finishReason(const plan::Call &call,
                          const sched::CallOutcome &outcome) {
  if (!outcome.succeeded)
    return FinishReason::Abort;
  for (const std::string &stop : call.options.stop)
    if (!stop.empty() && llvm::StringRef(outcome.text).endswith(stop))
      return FinishReason::Stop;
  return int64_t(outcome.tokens.size()) >= call.options.maxTokens
             ? FinishReason::Length
             : FinishReason::Stop;
}

} // namespace

Engine::Engine(sched::Executor &executor, ServerMetrics &metrics,
               size_t maxRequests, ThreadHooks hooks, size_t maxSessionCalls,
               size_t maxCalls)
    : executor(executor), metrics(metrics), maxRequests(maxRequests),
      maxSessionCalls(maxSessionCalls), maxCalls(maxCalls),
      hooks(std::move(hooks)) {}

Engine::~Engine() { shutdown("the server is shutting down"); }

void Engine::start() {
  restartSession();
  thread = std::thread([this] { loop(); });
}

bool Engine::isStopping() const {
  std::lock_guard<std::mutex> lock(mutex);
  return stopping;
}

size_t Engine::numInFlight() const {
  std::lock_guard<std::mutex> lock(mutex);
  return inFlight;
}

size_t Engine::numCallsInFlight() const {
  std::lock_guard<std::mutex> lock(mutex);
  return callsInFlight;
}

llvm::Expected<std::shared_ptr<ResponseStream>>
Engine::submit(RequestCalls calls, Clock::time_point arrival) {
  // A request without calls would never finish.
  if (calls.calls.empty())
    return apiError(400, "the request makes no model call");
  if (maxCalls && calls.calls.size() > maxCalls)
    return apiError(
        400, "the request makes " + std::to_string(calls.calls.size()) +
                 " model calls; the server holds at most " +
                 std::to_string(maxCalls) + " at once (--max-queued-calls)");
  auto request = std::make_shared<Request>();
  request->stream =
      std::make_shared<ResponseStream>(calls.calls.size(), arrival);
  request->choicesLeft = calls.calls.size();
  request->numCalls = calls.calls.size();
  request->calls = std::move(calls);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping)
      return apiError(503, "the server is shutting down");
    if (inFlight >= maxRequests)
      return apiError(429, "the server holds " + std::to_string(maxRequests) +
                               " requests already (--max-queue); retry "
                               "later");
    // Bounds the memory of what waits: one client's many calls cannot
    // queue without end (each also waits its turn: sched::FairQueue).
    if (maxCalls && callsInFlight + request->numCalls > maxCalls)
      return apiError(
          429, "the server holds " + std::to_string(callsInFlight) +
                   " model calls already and this request makes " +
                   std::to_string(request->numCalls) + "; at most " +
                   std::to_string(maxCalls) +
                   " are held at once (--max-queued-calls); retry later");
    ++inFlight;
    callsInFlight += request->numCalls;
    queue.push_back(request);
  }
  wake.notify_one();
  return request->stream;
}

void Engine::shutdown(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!stopping) {
      stopping = true;
      stopReason = reason;
    }
  }
  wake.notify_one();
  if (thread.joinable())
    thread.join();
}

void Engine::restartSession() {
  if (sessionOpen)
    executor.endSession();
  sessionOpen = true;
  plan = plan::Plan();
  outcomes.clear();
  owners.clear();
  activeCalls.clear();
  executor.beginSession(
      plan, outcomes, [this](plan::CallId call, llvm::StringRef piece) {
        CallOwner &owner = owners[call];
        owner.request->stream->appendText(owner.choice, piece);
      });
}

void Engine::admitQueued(std::vector<std::shared_ptr<Request>> &queued) {
  if (queued.empty())
    return;
  for (std::shared_ptr<Request> &request : queued) {
    // A request's calls refer to each other by their index (a span
    // query's plan); in the session they are numbered from `base`.
    const plan::CallId base = plan::CallId(plan.calls.size());
    for (size_t choice = 0; choice < request->calls.calls.size(); ++choice) {
      plan::Call &call = request->calls.calls[choice];
      call.id = base + plan::CallId(choice);
      for (plan::CallId &dependency : call.dependencies)
        dependency += base;
      for (plan::PlanSegment &segment : call.segments)
        for (plan::Piece &piece : segment.pieces)
          if (piece.call)
            *piece.call += base;
      activeCalls.push_back(call.id);
      owners.push_back({request, choice});
      plan.calls.push_back(std::move(call));
    }
    // Each request is its own unit of fairness in admission.
    executor.addCalls(nextTag++);
    for (uint64_t tokens : request->calls.promptTokens)
      request->figures.promptTokens += tokens;
    request->calls.calls.clear(); // moved into the plan
  }
  queued.clear();
}

void Engine::finishRequest(Request &request) {
  ResponseStream &stream = *request.stream;
  Clock::time_point now = Clock::now();
  request.figures.e2eSeconds = secondsBetween(stream.arrival(), now);
  Clock::time_point first = stream.firstToken();
  request.figures.hasFirstToken = first != stream.arrival();
  request.figures.ttftSeconds = secondsBetween(stream.arrival(), first);
  request.figures.interTokenSeconds = stream.takeInterTokenGaps();
  metrics.recordFinished(request.figures);
  std::lock_guard<std::mutex> lock(mutex);
  --inFlight;
  callsInFlight -= request.numCalls;
}

void Engine::deliverFinished() {
  // Requests whose clients went away: their calls left are cancelled.
  for (plan::CallId call : activeCalls) {
    Request &request = *owners[call].request;
    if (request.stream->isCancelled() && !executor.isDone(call))
      executor.cancelCall(call, "cancelled: the client went away");
  }
  auto finished = [&](plan::CallId id) {
    if (!executor.isDone(id))
      return false;
    CallOwner &owner = owners[id];
    Request &request = *owner.request;
    const plan::Call &call = plan.calls[id];
    sched::CallOutcome &outcome = outcomes[id];
    ChoiceResult result;
    result.succeeded = outcome.succeeded;
    result.error = outcome.error;
    result.reason = finishReason(call, outcome);
    result.stats = outcome.stats;
    if (call.options.logprobs >= 0) {
      result.tokens = outcome.tokens;
      result.logprobs = std::move(outcome.logprobs);
    }
    FinishedRequest &figures = request.figures;
    // A span query's prompts are known once its calls are admitted.
    if (request.calls.promptTokens.empty())
      figures.promptTokens += outcome.stats.promptTokens;
    figures.generationTokens += outcome.stats.generatedTokens;
    figures.cacheQueries += outcome.stats.promptTokens;
    figures.cacheHits += outcome.stats.reusedTokens;
    figures.spanTokensReused += outcome.stats.spanReusedTokens;
    figures.spanTokensRelocated += outcome.stats.relocatedTokens;
    figures.preemptions += outcome.stats.preemptions;
    figures.reasons.push_back(result.reason);
    // The metrics and the in-flight count first: a client that has its
    // answer sees them updated, and may submit again at once.
    if (--request.choicesLeft == 0)
      finishRequest(request);
    request.stream->finishChoice(owner.choice, std::move(result));
    // The session keeps its call slots until it restarts; their memory
    // goes now.
    plan.calls[id].segments.clear();
    outcome = sched::CallOutcome();
    owner.request.reset();
    return true;
  };
  activeCalls.erase(llvm::remove_if(activeCalls, finished), activeCalls.end());
}

void Engine::publishLoad() {
  size_t queuedCalls;
  {
    std::lock_guard<std::mutex> lock(mutex);
    queuedCalls = 0;
    for (const auto &request : queue)
      queuedCalls += request->calls.calls.size();
  }
  const kv::BlockPool &pool = executor.pool();
  double usage = pool.numBlocks()
                     ? 1.0 - double(pool.numFreeBlocks()) / pool.numBlocks()
                     : 0.0;
  EngineLoad load;
  load.running = executor.numRunning();
  load.waiting = executor.numWaiting() + queuedCalls;
  load.kvCacheUsage = usage;
  load.blocksEvicted = pool.numEvictions();
  load.cachedBlocks = pool.numCachedBlocks();
  metrics.setLoad(load);
}

void Engine::loop() {
  if (hooks.atStart)
    hooks.atStart();
  std::vector<std::shared_ptr<Request>> queued;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (activeCalls.empty())
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping)
        break;
      // A full session drains first; the queue joins the next one.
      if (plan.calls.size() < maxSessionCalls)
        queued.swap(queue);
    }
    admitQueued(queued);
    // Cancellations first, so a step never runs for a client gone.
    deliverFinished();
    bool ran = executor.step();
    deliverFinished();
    publishLoad();
    if (ran && hooks.afterStep)
      hooks.afterStep();
    if (activeCalls.empty() && !plan.calls.empty())
      restartSession();
    else if (!ran && !activeCalls.empty())
      // Nothing could be admitted this time (should not last): no spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Shutting down: what is queued or running fails with the reason.
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex);
    queued.swap(queue);
    reason = stopReason;
  }
  admitQueued(queued);
  for (plan::CallId call : activeCalls)
    executor.cancelCall(call, reason);
  deliverFinished();
  publishLoad();
  executor.endSession();
}

} // namespace spanc::server
