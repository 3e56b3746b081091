//===- Fairness.h - Admission order that is fair across requests ----------===//
//
// Which waiting call the scheduler tries next (docs/ARCHITECTURE.md,
// "Running a plan", "Serving"). Waiting calls are grouped by the request
// they serve (a server's client request; all of `spanc run`'s calls are one
// request). Admission tries the front call of the request with the fewest
// running calls, the earliest request on a tie; a request at
// FairnessOptions::maxRunningPerRequest waits; a request whose front call
// must wait for room in the cache is passed over for the rest of the pass,
// so a small call of another request can still fit. With one request this
// is plan order, as before: one client's 256 calls no longer queue every
// other client's call behind them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_FAIRNESS_H
#define SPANC_RUNTIME_SCHED_FAIRNESS_H

#include "plan/Plan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>

namespace spanc::sched {

/// The request a call serves: the unit of fairness. Later requests have
/// larger tags.
using RequestTag = uint64_t;

struct FairnessOptions {
  /// Calls of one request running at once; 0: no cap.
  uint32_t maxRunningPerRequest = 0;
  /// Prompt tokens one request may compute in a step while another request
  /// has a prompt to compute too (besides an equal share of the step's
  /// budget); what they leave goes to anyone. 0: no cap.
  int64_t maxPrefillTokensPerRequest = 0;
};

/// The waiting calls of a run, in the order admission tries them.
class FairQueue {
public:
  struct Entry {
    plan::CallId call = 0;
    RequestTag request = 0;
  };

  explicit FairQueue(const FairnessOptions &options = {}) : options(options) {}

  /// Queues `call` behind the waiting calls of its request.
  void push(plan::CallId call, RequestTag request);
  /// Queues `call` ahead of them (a preempted or held-back call).
  void pushFront(plan::CallId call, RequestTag request);
  /// Takes `call` out wherever it is; false if it was not queued.
  bool erase(plan::CallId call, RequestTag request);
  bool contains(plan::CallId call, RequestTag request) const;
  size_t size() const { return numCalls; }
  bool empty() const { return numCalls == 0; }
  void clear();

  /// Starts an admission pass: nothing counted running, none passed over.
  void beginPass();
  /// Counts one running call of `request` in this pass.
  void countRunning(RequestTag request);
  uint32_t numRunning(RequestTag request) const;
  /// The call to try next: the front call of the request with the fewest
  /// running calls (the earliest request on a tie) among those under the
  /// cap and not passed over. None when no request may admit a call.
  std::optional<Entry> next() const;
  /// Takes the front call of `request` (what next() returned) out.
  void popFront(RequestTag request);
  /// Passes `request` over for the rest of this pass: its front call waits
  /// for room, and so do its later calls (plan order within a request).
  void passOver(RequestTag request);

private:
  FairnessOptions options;
  /// Ordered by tag, so a tie goes to the earliest request.
  std::map<RequestTag, std::deque<plan::CallId>> queues;
  llvm::DenseMap<RequestTag, uint32_t> running;
  llvm::DenseSet<RequestTag> passedOver;
  size_t numCalls = 0;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_FAIRNESS_H
