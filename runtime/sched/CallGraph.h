//===- CallGraph.h - A run's calls, their dependencies and outputs --------===//
//
// The DAG half of scheduling (docs/ARCHITECTURE.md, "Running a plan"): which
// of a plan's calls are ready (every call they splice an output from is
// done), when each became ready, which request each serves, the outputs of
// the calls that finished (spliced into later calls' prompts) and the
// end-of-turn trailer a consumer puts after each output. It knows nothing
// of the cache or of batches: the scheduler admits what it reports ready.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_CALLGRAPH_H
#define SPANC_RUNTIME_SCHED_CALLGRAPH_H

#include "plan/Plan.h"
#include "runtime/sched/Fairness.h"

#include "llvm/ADT/SmallVector.h"

#include <chrono>
#include <optional>
#include <vector>

namespace spanc::sched {

class CallGraph {
public:
  using Clock = std::chrono::steady_clock;
  using Tokens = std::vector<plan::TokenId>;

  /// Starts over with `plan` (its calls are registered by addCalls).
  void reset(const plan::Plan *plan);
  /// Registers calls [numCalls(), the plan's end), serving `request`: their
  /// dependencies and trailers. Appends those ready now to `ready`, in plan
  /// order (a dependency already done counts as met).
  void addCalls(RequestTag request, llvm::SmallVectorImpl<plan::CallId> &ready);
  /// Marks `call` done, keeping `output` (a succeeded call's tokens) for the
  /// calls that splice it in. Appends the dependents that became ready.
  void markDone(plan::CallId call, std::optional<Tokens> output,
                llvm::SmallVectorImpl<plan::CallId> &ready);
  /// A call leaving before it was ready (cancelled) counts from now.
  void markReadyNow(plan::CallId call);

  size_t numCalls() const { return done.size(); }
  bool isDone(plan::CallId call) const { return done[call]; }
  RequestTag requestOf(plan::CallId call) const { return requestTags[call]; }
  Clock::time_point readyAt(plan::CallId call) const { return ready[call]; }
  const plan::Call &call(plan::CallId call) const { return plan->calls[call]; }
  /// The end-of-turn tokens a consumer puts after `call`'s output (none
  /// when no call splices it in).
  const std::optional<Tokens> &trailer(plan::CallId call) const {
    return trailers[call];
  }
  /// `call`'s prompt with the outputs it splices in; std::nullopt when one
  /// of them is missing (the call it comes from failed).
  std::optional<std::vector<plan::Segment>> resolve(plan::CallId call) const {
    return plan::resolveCall(plan->calls[call], outputs);
  }

private:
  const plan::Plan *plan = nullptr;
  std::vector<uint32_t> missingDependencies;
  std::vector<llvm::SmallVector<plan::CallId, 4>> dependents;
  std::vector<Clock::time_point> ready;
  std::vector<bool> done;
  std::vector<RequestTag> requestTags;
  std::vector<std::optional<Tokens>> outputs;
  std::vector<std::optional<Tokens>> trailers;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_CALLGRAPH_H
