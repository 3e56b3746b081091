//===- CallGraph.cpp - A run's calls, their dependencies and outputs ------===//

#include "runtime/sched/CallGraph.h"

namespace spanc::sched {

void CallGraph::reset(const plan::Plan *newPlan) {
  plan = newPlan;
  missingDependencies.clear();
  dependents.clear();
  ready.clear();
  done.clear();
  requestTags.clear();
  outputs.clear();
  trailers.clear();
}

void CallGraph::addCalls(RequestTag request,
                         llvm::SmallVectorImpl<plan::CallId> &readyCalls) {
  const size_t first = done.size();
  const size_t count = plan->calls.size();
  missingDependencies.resize(count, 0);
  dependents.resize(count);
  ready.resize(count, Clock::time_point());
  done.resize(count, false);
  requestTags.resize(count, request);
  outputs.resize(count, std::nullopt);
  trailers.resize(count, std::nullopt);
  for (size_t id = first; id < count; ++id)
    for (const plan::PlanSegment &segment : plan->calls[id].segments)
      for (const plan::Piece &piece : segment.pieces)
        if (piece.call && !trailers[*piece.call])
          trailers[*piece.call] = piece.trailer;
  for (size_t id = first; id < count; ++id) {
    const plan::Call &call = plan->calls[id];
    // A dependency that finished before this call was added counts as met.
    uint32_t missing = 0;
    for (plan::CallId dependency : call.dependencies) {
      if (done[dependency])
        continue;
      ++missing;
      dependents[dependency].push_back(call.id);
    }
    missingDependencies[call.id] = missing;
    if (missing == 0) {
      ready[call.id] = Clock::now();
      readyCalls.push_back(call.id);
    }
  }
}

void CallGraph::markDone(plan::CallId call, std::optional<Tokens> output,
                         llvm::SmallVectorImpl<plan::CallId> &readyCalls) {
  done[call] = true;
  if (output)
    outputs[call] = std::move(output);
  for (plan::CallId dependent : dependents[call]) {
    // A dependent cancelled before it was ready is done already.
    if (--missingDependencies[dependent] == 0 && !done[dependent]) {
      ready[dependent] = Clock::now();
      readyCalls.push_back(dependent);
    }
  }
}

void CallGraph::markReadyNow(plan::CallId call) {
  if (ready[call] == Clock::time_point())
    ready[call] = Clock::now();
}

} // namespace spanc::sched
