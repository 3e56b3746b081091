//===- Scheduler.h - Decides each step of a run: admission, batch, preemption//
//
// The scheduler half of the executor (docs/ARCHITECTURE.md, "Running a
// plan"). Over the run's CallGraph (which calls are ready) it admits ready
// calls to the KV cache manager (holding back a call that would miss a block in
// flight, and one the cache cannot hold with room to grow), asks CIDRA for
// the step's relocations, and fills a SchedulerOutput: a decode token for
// every generating call first, then prefill chunks of whole blocks under
// the step's token budget. It applies the runner's report: commits
// prefills, appends sampled tokens (preempting the most recently admitted
// call when the cache is full), flushes trailers after generation and
// finishes calls. It never touches K/V memory or a model: the block copies
// its appends need go into the next step's SchedulerOutput for a backend
// to run first.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_SCHEDULER_H
#define SPANC_RUNTIME_SCHED_SCHEDULER_H

#include "plan/Plan.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/sched/CallGraph.h"
#include "runtime/sched/CallOutcome.h"
#include "runtime/sched/Fairness.h"
#include "runtime/sched/PhaseProfile.h"
#include "runtime/sched/SchedulerOutput.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spanc::sched {

struct SchedulerOptions {
  unsigned blockSize = 16;
  /// Tokens one forward step may process (decode tokens + prefill chunks).
  int64_t stepTokenBudget = 512;
  /// See ExecutorOptions::shareInFlightBlocks.
  bool shareInFlightBlocks = true;
  /// The model's context length: a call whose prompt and max_tokens do not
  /// fit it fails at admission, before any of it is computed. 0: no bound.
  int64_t contextLength = 0;
  /// Runs of a call that extend the previous one's page list and are
  /// scheduled in one step run as one sequence with query indices
  /// (kv::ComputeRun::extendsPrevious); for a backend that takes them.
  bool mergeComputeRuns = true;
  /// Caps per request (a server's client request) on running calls and on
  /// prompt tokens per step; none by default (Fairness.h).
  FairnessOptions fairness;
};

/// What a call that is not running waits for.
enum class WaitingFor {
  /// Admission: it became ready and was not tried yet (plan order within
  /// its request, fair across requests: Fairness.h).
  Admission,
  /// A running call to commit a block it would otherwise compute again
  /// (in-flight sharing); other calls are admitted past it.
  BlocksInFlight,
  /// Room in the cache for its prompt and its growth: retried, ahead of
  /// later calls, when a running call releases blocks.
  CacheRoom,
  /// Re-admission after it gave way: preempted for another call's growth,
  /// or deferred because the copies its relocations need did not fit. It
  /// resumes with what it generated as part of its prompt.
  Readmission,
};

const char *waitingForName(WaitingFor reason);

class Scheduler {
public:
  using Clock = std::chrono::steady_clock;

  Scheduler(kv::KvCacheManager &cacheManager, kv::BlockPool &pool,
            const SchedulerOptions &options);
  ~Scheduler();

  /// Starts a run of `plan`; results go to `outcomes` (one per call, which
  /// the runner fills with what calls generate). Its calls serve request 0.
  void beginRun(const plan::Plan &plan, std::vector<CallOutcome> &outcomes);
  /// Marks the calls that never ran and drops the run's state.
  void endRun();
  /// The plan of the run grew: calls from numCalls() to the plan's end were
  /// appended (a server adds requests to a run in progress). Their
  /// dependencies must be calls of the plan; the ready ones join the
  /// waiting queue behind the calls already there. They serve `request`
  /// (the unit of fairness; later requests get larger tags). Call between
  /// steps.
  void addCalls(RequestTag request = 0);
  /// Ends one call between steps: a running call fails with `reason` and
  /// releases its blocks, a waiting one fails without running, one already
  /// done stays as it was (a client that went away).
  void cancelCall(plan::CallId call, const std::string &reason);

  /// Fills `output` with this step's decisions: the block copies the last
  /// update()'s appends need; admission of ready calls, fairly across
  /// requests (FairQueue: the request with the fewest running calls first,
  /// plan order within a request), until none can be; the CIDRA plan
  /// (which may defer new calls back to waiting); then the batch. With
  /// nothing running it stops after admission (`output` then says how many
  /// calls it admitted). Fails when CIDRA cannot plan the step.
  llvm::Error schedule(SchedulerOutput &output);
  /// Applies the runner's report on the step `output` described.
  void update(const SchedulerOutput &output, const RunnerOutput &result);
  /// The step failed as a whole (a malformed batch): every running call
  /// fails with `message`.
  void failStep(const SchedulerOutput &output, const std::string &message);
  /// Stops the run between steps: running calls fail with `reason` and
  /// release their blocks; calls never admitted fail with it too.
  void cancel(const std::string &reason);

  size_t numCalls() const;
  size_t numDone() const { return callsDone; }
  bool isDone(plan::CallId call) const { return graph.isDone(call); }
  /// The request `call` serves.
  RequestTag requestOf(plan::CallId call) const {
    return graph.requestOf(call);
  }
  size_t numRunning() const { return running.size(); }
  size_t numWaiting() const { return waiting.size(); }
  bool hasRunning() const { return !running.empty(); }
  bool hasWaiting() const { return !waiting.empty(); }
  /// What a waiting call waits for (std::nullopt when it is not waiting).
  std::optional<WaitingFor> waitingFor(plan::CallId call) const;

  /// What schedule() spent since the last reset: admission (the cache
  /// manager's share included), CIDRA's plan and the batch.
  const PhaseProfile &phases() const { return phaseTimes; }
  void resetPhases() { phaseTimes = PhaseProfile(); }

private:
  struct Request;

  /// Admits ready calls until none can be; returns how many it admitted.
  uint32_t admit();
  /// Blocks `request` may still need to reach its max_tokens.
  uint64_t growthBlocks(const Request &request) const;
  void park(std::unique_ptr<Request> request, WaitingFor reason);
  /// The parked request of `call`, taken out of `parked` (null if none).
  std::unique_ptr<Request> takeParked(plan::CallId call);
  /// Moves a running request back to the front of the waiting queue.
  void requeue(Request &request, WaitingFor reason);
  void finish(Request &request, bool succeeded, std::string error);
  bool preemptFor(Request &needy);
  /// Schedules prompt chunks of `request` within `allowance` tokens (what
  /// it takes is subtracted).
  void schedulePrefill(Request &request, int64_t &allowance,
                       SchedulerOutput &output);
  /// Remembers the decode slot and hands its copy-on-write copy out.
  void takeSlot(Request &request, const kv::DecodeSlot &slot);
  /// Queues the span moves the step asked for (after its forward pass).
  void queueSpanMoves();
  /// Lays a blend segment out as a BlendTask of `output`.
  void scheduleBlend(const Request &request, const kv::RequestPlan &requestPlan,
                     const kv::SegmentPlan &segment, SchedulerOutput &output);
  /// Appends blocks [blocksDone, blocksDone + take) of `run`'s tokens with
  /// their positions and logical indices.
  void appendRunTokens(const kv::RequestPlan &requestPlan,
                       const kv::ComputeRun &run, uint32_t blocksDone,
                       uint32_t take, SchedulerOutput &output);
  /// Appends `pages`, which segment `reader` of the plan reads, to the page
  /// list of `sequence` (the output's last), with their span-page flags
  /// (kv::SpanOptions::temperature, massScale).
  void appendPages(const kv::RequestPlan &plan, const kv::SegmentPlan &reader,
                   llvm::ArrayRef<uint32_t> pages, SchedulerOutput &output,
                   ScheduledSequence &sequence);

  kv::KvCacheManager &cache;
  kv::BlockPool &blockPool;
  SchedulerOptions options;
  kv::RequestId nextRequestId = 1;

  // The run's state.
  const plan::Plan *plan = nullptr;
  std::vector<CallOutcome> *outcomes = nullptr;
  /// Readiness, requests, outputs and trailers of the run's calls.
  CallGraph graph;
  /// Calls waiting for admission, in the order they are tried.
  FairQueue waiting;
  /// The requests of waiting calls that were laid out already (held back,
  /// short of room, preempted or deferred), each with what it waits for.
  llvm::DenseMap<plan::CallId, std::unique_ptr<Request>> parked;
  /// Admitted calls, oldest first.
  std::vector<std::unique_ptr<Request>> running;
  /// The running request of each sequence of the last schedule().
  std::vector<Request *> scheduled;
  /// Copy-on-write copies update() handed out, with the request each
  /// serves, for the next schedule()'s output.
  std::vector<std::pair<kv::RequestId, kv::RelocationOp>> copies;
  /// Scratch lists of update(), kept for their capacity.
  std::vector<Request *> finishedScratch, needSlotScratch, unsampledScratch;
  /// Scratch of schedule(): prompt tokens per request this step.
  llvm::SmallDenseMap<RequestTag, int64_t, 8> prefillTaken;
  size_t callsDone = 0;
  uint64_t admissions = 0;
  PhaseProfile phaseTimes;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_SCHEDULER_H
