//===- Fairness.cpp - Admission order that is fair across requests --------===//

#include "runtime/sched/Fairness.h"

#include "llvm/ADT/STLExtras.h"

namespace spanc::sched {

void FairQueue::push(plan::CallId call, RequestTag request) {
  queues[request].push_back(call);
  ++numCalls;
}

void FairQueue::pushFront(plan::CallId call, RequestTag request) {
  queues[request].push_front(call);
  ++numCalls;
}

bool FairQueue::erase(plan::CallId call, RequestTag request) {
  auto found = queues.find(request);
  if (found == queues.end())
    return false;
  auto position = llvm::find(found->second, call);
  if (position == found->second.end())
    return false;
  found->second.erase(position);
  if (found->second.empty())
    queues.erase(found);
  --numCalls;
  return true;
}

bool FairQueue::contains(plan::CallId call, RequestTag request) const {
  auto found = queues.find(request);
  return found != queues.end() && llvm::is_contained(found->second, call);
}

void FairQueue::clear() {
  queues.clear();
  running.clear();
  passedOver.clear();
  numCalls = 0;
}

void FairQueue::beginPass() {
  running.clear();
  passedOver.clear();
}

void FairQueue::countRunning(RequestTag request) { ++running[request]; }

uint32_t FairQueue::numRunning(RequestTag request) const {
  auto found = running.find(request);
  return found == running.end() ? 0 : found->second;
}

std::optional<FairQueue::Entry> FairQueue::next() const {
  std::optional<Entry> best;
  uint32_t bestRunning = 0;
  for (const auto &[request, calls] : queues) {
    if (passedOver.count(request))
      continue;
    const uint32_t count = numRunning(request);
    if (options.maxRunningPerRequest && count >= options.maxRunningPerRequest)
      continue;
    // Strictly fewer: on a tie the earlier request (map order) stays.
    if (best && count >= bestRunning)
      continue;
    best = Entry{calls.front(), request};
    bestRunning = count;
    if (count == 0)
      break; // none can have fewer, and this one is the earliest
  }
  return best;
}

void FairQueue::popFront(RequestTag request) {
  auto found = queues.find(request);
  if (found == queues.end())
    return;
  found->second.pop_front();
  if (found->second.empty())
    queues.erase(found);
  --numCalls;
}

void FairQueue::passOver(RequestTag request) { passedOver.insert(request); }

} // namespace spanc::sched
