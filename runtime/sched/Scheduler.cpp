//===- Scheduler.cpp - Decides each step of a run: admission, batch,
// preemption//

#include "runtime/sched/Scheduler.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"

#include <algorithm>
#include <cstdint>

namespace spanc::sched {

namespace {

using Clock = Scheduler::Clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

const char *waitingForName(WaitingFor reason) {
  switch (reason) {
  case WaitingFor::Admission:
    return "admission";
  case WaitingFor::BlocksInFlight:
    return "blocks in flight";
  case WaitingFor::CacheRoom:
    return "cache room";
  case WaitingFor::Readmission:
    return "readmission";
  }
  return "?";
}

/// A call laid out for the KV cache: running, or parked while it waits.
struct Scheduler::Request {
  plan::CallId call = 0;
  kv::RequestId request = 0;
  std::vector<kv::Segment> segments; ///< the prompt as admitted
  WaitingFor waitingFor = WaitingFor::Admission;
  /// Index into the plan's runs, and blocks of that run done.
  uint32_t runIndex = 0;
  uint32_t blocksDone = 0;
  bool decoding = false;
  /// ReRoPE: the spans computed at their compute positions were queued for
  /// their move (the run marked afterSpanRelocation may start once the
  /// next step's relocations ran): `movedBeforeRun` is the run whose
  /// barrier was passed; `moveSpansAfterStep` asks for the move.
  uint32_t movedBeforeRun = UINT32_MAX;
  bool moveSpansAfterStep = false;
  /// Generation is over; these tokens are still fed for their K/V only, so
  /// later calls that splice the output in find it cached (see update()).
  bool finishing = false;
  std::vector<kv::TokenId> flushQueue;
  /// The sampled token whose K/V the next step computes.
  kv::TokenId pending = -1;
  kv::DecodeSlot pendingSlot;
  /// Generated tokens already folded into `segments` by preemptions.
  size_t tokensInPrompt = 0;
  Clock::time_point firstToken;
  uint64_t admissionOrder = 0;
  /// schedule() gave it a prompt chunk or a blend in this step.
  bool prefilledThisStep = false;
};

Scheduler::Scheduler(kv::KvCacheManager &cacheManager, kv::BlockPool &pool,
                     const SchedulerOptions &options)
    : cache(cacheManager), blockPool(pool), options(options),
      waiting(options.fairness) {}

Scheduler::~Scheduler() = default;

size_t Scheduler::numCalls() const { return plan ? plan->calls.size() : 0; }

void Scheduler::beginRun(const plan::Plan &newPlan,
                         std::vector<CallOutcome> &runOutcomes) {
  plan = &newPlan;
  outcomes = &runOutcomes;
  outcomes->clear();
  graph.reset(&newPlan);
  waiting.clear();
  parked.clear();
  running.clear();
  scheduled.clear();
  copies.clear();
  callsDone = 0;
  admissions = 0;
  addCalls(0);
}

std::unique_ptr<Scheduler::Request> Scheduler::takeParked(plan::CallId call) {
  auto found = parked.find(call);
  if (found == parked.end())
    return nullptr;
  std::unique_ptr<Request> request = std::move(found->second);
  parked.erase(found);
  return request;
}

void Scheduler::addCalls(RequestTag request) {
  outcomes->resize(plan->calls.size());
  llvm::SmallVector<plan::CallId, 8> ready;
  graph.addCalls(request, ready);
  for (plan::CallId call : ready)
    waiting.push(call, request);
}

void Scheduler::cancelCall(plan::CallId callId, const std::string &reason) {
  if (callId >= graph.numCalls() || graph.isDone(callId))
    return;
  auto active = llvm::find_if(
      running, [&](const auto &request) { return request->call == callId; });
  if (active != running.end()) {
    finish(**active, false, reason);
    return;
  }
  // Waiting (or not ready yet): it leaves the queue and fails unrun, as a
  // call whose dependency failed does at admission.
  waiting.erase(callId, graph.requestOf(callId));
  std::unique_ptr<Request> request = takeParked(callId);
  if (!request) {
    request = std::make_unique<Request>();
    request->call = callId;
  }
  graph.markReadyNow(callId);
  running.push_back(std::move(request));
  finish(*running.back(), false, reason);
}

void Scheduler::endRun() {
  for (size_t id = 0; id < graph.numCalls(); ++id)
    if (!graph.isDone(plan::CallId(id)) && (*outcomes)[id].error.empty())
      (*outcomes)[id].error = "not run: the plan could not make progress";
  waiting.clear();
  parked.clear();
  running.clear();
  scheduled.clear();
  plan = nullptr;
  outcomes = nullptr;
}

std::optional<WaitingFor> Scheduler::waitingFor(plan::CallId call) const {
  auto found = parked.find(call);
  if (found != parked.end())
    return found->second->waitingFor;
  if (call < graph.numCalls() && waiting.contains(call, graph.requestOf(call)))
    return WaitingFor::Admission;
  return std::nullopt;
}

void Scheduler::park(std::unique_ptr<Request> request, WaitingFor reason) {
  request->waitingFor = reason;
  plan::CallId call = request->call;
  parked[call] = std::move(request);
}

uint32_t Scheduler::admit() {
  uint32_t admitted = 0;
  // Calls held back for blocks in flight go back to the front, in order,
  // however this returns.
  llvm::SmallVector<plan::CallId, 4> heldBack;
  auto restoreHeldBack = llvm::make_scope_exit([&] {
    for (plan::CallId held : llvm::reverse(heldBack))
      waiting.pushFront(held, graph.requestOf(held));
  });
  waiting.beginPass();
  for (const auto &other : running)
    waiting.countRunning(graph.requestOf(other->call));
  while (std::optional<FairQueue::Entry> front = waiting.next()) {
    const plan::CallId callId = front->call;
    const plan::Call &call = graph.call(callId);

    std::unique_ptr<Request> request = takeParked(callId);
    if (!request) {
      request = std::make_unique<Request>();
      request->call = callId;
      std::optional<std::vector<kv::Segment>> segments = graph.resolve(callId);
      if (!segments) {
        waiting.popFront(front->request);
        running.push_back(std::move(request));
        finish(*running.back(), false,
               "an output it splices in is missing (a call it depends on "
               "failed)");
        continue;
      }
      request->segments = std::move(*segments);
      // Lowering checked what it knew; the outputs spliced in are known
      // now. A call that cannot fit fails here, not after its prefill.
      if (options.contextLength > 0) {
        uint64_t prompt = 0;
        for (const kv::Segment &segment : request->segments)
          prompt += segment.tokens.size();
        if (prompt + uint64_t(std::max<int64_t>(call.options.maxTokens, 0)) >
            uint64_t(options.contextLength)) {
          waiting.popFront(front->request);
          running.push_back(std::move(request));
          finish(*running.back(), false,
                 "its prompt of " + std::to_string(prompt) +
                     " tokens and max_tokens " +
                     std::to_string(call.options.maxTokens) +
                     " exceed the model's context of " +
                     std::to_string(options.contextLength) + " tokens");
          continue;
        }
      }
    }

    if (options.shareInFlightBlocks &&
        cache.needsBlocksInFlight(request->segments)) {
      park(std::move(request), WaitingFor::BlocksInFlight);
      waiting.popFront(front->request);
      heldBack.push_back(callId);
      continue;
    }

    // Admission control: besides its prompt (which admit() checks), a call
    // needs room to grow to max_tokens, and so do the running ones. Taking
    // that into account up front keeps preemption (which recomputes, and so
    // may change a greedy near-tie) for when the estimate is wrong.
    if (!running.empty()) {
      // Its layout's blocks: segments, recomputed span blocks, blends.
      uint64_t needed =
          growthBlocks(*request) + cache.layoutBlocks(request->segments);
      for (const auto &other : running)
        needed += growthBlocks(*other);
      if (needed > blockPool.numFreeBlocks()) {
        // Retried when a running call releases blocks; its request's later
        // calls wait behind it, another request's smaller call may fit.
        park(std::move(request), WaitingFor::CacheRoom);
        waiting.passOver(front->request);
        continue;
      }
    }
    request->request = nextRequestId++;
    kv::AdmitResult result = cache.admit(request->request, request->segments);
    if (result.status == kv::AdmitStatus::Wait && !running.empty()) {
      park(std::move(request), WaitingFor::CacheRoom);
      waiting.passOver(front->request);
      continue;
    }
    waiting.popFront(front->request);
    if (result.status != kv::AdmitStatus::Admitted) {
      running.push_back(std::move(request));
      finish(*running.back(), false,
             "the KV cache cannot hold this call: " + result.reason);
      continue;
    }
    const kv::RequestPlan &requestPlan = cache.plan(request->request);
    CallStats &stats = (*outcomes)[callId].stats;
    request->waitingFor = WaitingFor::Admission;
    request->admissionOrder = admissions++;
    request->runIndex = 0;
    request->blocksDone = 0;
    request->decoding = false;
    request->movedBeforeRun = UINT32_MAX;
    request->moveSpansAfterStep = false;
    stats.queuedSeconds = secondsSince(graph.readyAt(callId));
    if (stats.preemptions == 0) {
      // (Re-)admission after a deferral counts the final layout only.
      stats.promptTokens = requestPlan.numPromptTokens;
      stats.reusedTokens = requestPlan.numReusedTokens;
      stats.computedTokens =
          requestPlan.numPromptTokens - requestPlan.numReusedTokens;
      stats.relocatedTokens = 0;
      for (const kv::LogicalBlock &block : requestPlan.blocks)
        if (block.reused &&
            blockPool.storedPosition(block.block) != block.position &&
            cache.relocationMode() == kv::RelocationMode::Rerope)
          stats.relocatedTokens += block.numTokens;
      // The span part of reusedTokens: what prefix caching could not reuse.
      stats.spanReusedTokens = kv::countReusedTokens(requestPlan, true);
    }
    if (requestPlan.runs.empty() || requestPlan.runs.back().firstToken +
                                            requestPlan.runs.back().numTokens !=
                                        requestPlan.numPromptTokens) {
      // Every block hit: nothing produces the logits of the last prompt
      // token. The cache manager keeps the last block a miss; this guards
      // that contract.
      cache.release(request->request);
      running.push_back(std::move(request));
      finish(*running.back(), false,
             "internal error: the last prompt block was not scheduled for "
             "computation");
      continue;
    }
    running.push_back(std::move(request));
    waiting.countRunning(front->request);
    ++admitted;
  }
  return admitted;
}

uint64_t Scheduler::growthBlocks(const Request &request) const {
  const plan::Call &call = plan->calls[request.call];
  int64_t remaining = call.options.maxTokens -
                      int64_t((*outcomes)[request.call].tokens.size()) + 1;
  // One more for the copy-on-write of a cached or shared last block.
  return uint64_t(std::max<int64_t>(remaining, 0) + options.blockSize - 1) /
             options.blockSize +
         1;
}

void Scheduler::requeue(Request &request, WaitingFor reason) {
  auto found = llvm::find_if(
      running, [&](const auto &other) { return other.get() == &request; });
  waiting.pushFront(request.call, graph.requestOf(request.call));
  park(std::move(*found), reason);
  running.erase(found);
}

void Scheduler::appendPages(const kv::RequestPlan &requestPlan,
                            const kv::SegmentPlan &reader,
                            llvm::ArrayRef<uint32_t> pages,
                            SchedulerOutput &output,
                            ScheduledSequence &sequence) {
  if (sequence.numPages == 0)
    sequence.firstPage = uint32_t(output.blockIds.size());
  sequence.numPages += uint32_t(pages.size());
  for (uint32_t page : pages) {
    output.blockIds.push_back(int32_t(requestPlan.blocks[page].block));
    output.validTokens.push_back(int32_t(requestPlan.blocks[page].numTokens));
    output.spanPages.push_back(
        kv::readsScaled(requestPlan, reader, page, cache.spanOptions()));
  }
}

llvm::Error Scheduler::schedule(SchedulerOutput &output) {
  output.clear();
  scheduled.clear();
  // The copies first: the blocks they read may be recycled by this step's
  // admissions and written by its relocations and forward pass. A request
  // that left since (cancelled, preempted) released its copy's block.
  for (const auto &[request, copy] : copies)
    if (cache.contains(request))
      output.blockCopies.push_back(copy);
  copies.clear();
  Clock::time_point mark = Clock::now();
  output.admittedCalls = admit();
  lap(mark, phaseTimes.admissionSeconds);
  if (running.empty())
    return llvm::Error::success();
  auto timeBatch =
      llvm::make_scope_exit([&] { lap(mark, phaseTimes.batchSeconds); });
  llvm::Expected<kv::StepPlan> stepPlan = cache.planStep();
  if (!stepPlan)
    return stepPlan.takeError();
  output.stepPlan = std::move(*stepPlan);
  output.spanScaling.temperature = cache.spanOptions().temperature;
  output.spanScaling.massScale = cache.spanOptions().massScale;
  // The plan's temporaries go back to the pool now: nothing allocates
  // before the runner has run its batches, which come first in the step.
  cache.finishStep(output.stepPlan);
  // Requests whose duplicates did not fit were released: admit them again.
  for (kv::RequestId id : llvm::reverse(output.stepPlan.deferred)) {
    auto found = llvm::find_if(
        running, [&](const auto &other) { return other->request == id; });
    if (found != running.end())
      requeue(**found, WaitingFor::Readmission);
  }
  lap(mark, phaseTimes.relocationPlanSeconds);
  if (running.empty())
    return llvm::Error::success();

  int64_t budget = options.stepTokenBudget;
  // Decode first: one token for every generating call, so long prefills
  // never stall running decodes (and a backend wants them first).
  for (const auto &owned : running) {
    Request &request = *owned;
    if (!request.decoding)
      continue;
    const kv::RequestPlan &requestPlan = cache.plan(request.request);
    ScheduledSequence &sequence = output.sequences.emplace_back();
    sequence.call = request.call;
    sequence.rows = model::RowKind::Decode;
    sequence.wantsLogits = true;
    sequence.sample = !request.finishing;
    sequence.firstToken = uint32_t(output.tokens.size());
    sequence.numTokens = 1;
    output.tokens.push_back(request.pending);
    output.positions.push_back(int32_t(request.pendingSlot.position));
    output.queryIndices.push_back(-1);
    appendPages(requestPlan, requestPlan.segments.back(),
                requestPlan.segments.back().pages, output, sequence);
    scheduled.push_back(&request);
    --budget;
  }
  // Then prefill, whole blocks at a time, oldest call first. While more
  // than one request has a prompt to compute, each first gets at most an
  // equal share of the budget left (and maxPrefillTokensPerRequest), so
  // one request's prompts never hold another's first token back; what
  // they leave goes to the calls not served yet, oldest first.
  for (const auto &owned : running)
    owned->prefilledThisStep = false;
  const int64_t cap = options.fairness.maxPrefillTokensPerRequest;
  if (cap > 0 && budget > 0) {
    prefillTaken.clear();
    for (const auto &owned : running)
      if (!owned->decoding)
        prefillTaken.try_emplace(graph.requestOf(owned->call), 0);
    if (prefillTaken.size() > 1) {
      const int64_t share = std::min(
          cap, std::max<int64_t>(options.blockSize,
                                 budget / int64_t(prefillTaken.size())));
      for (const auto &owned : running) {
        if (budget <= 0)
          break;
        Request &request = *owned;
        if (request.decoding)
          continue;
        int64_t &taken = prefillTaken[graph.requestOf(request.call)];
        int64_t allowance = std::min(budget, share - taken);
        if (allowance <= 0)
          continue;
        const int64_t before = allowance;
        schedulePrefill(request, allowance, output);
        taken += before - allowance;
        budget -= before - allowance;
      }
    }
  }
  for (const auto &owned : running) {
    if (budget <= 0)
      break;
    Request &request = *owned;
    if (request.decoding || request.prefilledThisStep)
      continue;
    schedulePrefill(request, budget, output);
  }
  return llvm::Error::success();
}

void Scheduler::schedulePrefill(Request &request, int64_t &allowance,
                                SchedulerOutput &output) {
  const unsigned blockSize = options.blockSize;
  const kv::RequestPlan &requestPlan = cache.plan(request.request);
  bool scheduledPrefill = false;
  // The sequence of the run this call completed last, which the next run
  // may extend.
  size_t openSequence = SIZE_MAX;
  while (allowance > 0 && request.runIndex < requestPlan.runs.size()) {
    const kv::ComputeRun &run = requestPlan.runs[request.runIndex];
    if (run.afterSpanRelocation && request.movedBeforeRun != request.runIndex) {
      // Its spans were computed after their prefix, at other positions
      // than they take here: they move first (after this step's forward
      // pass, which may be computing them; docs/ARCHITECTURE.md, "Span
      // attention").
      request.moveSpansAfterStep = true;
      break;
    }
    const kv::SegmentPlan &segment = requestPlan.segments[run.segment];
    if (segment.blend) {
      // A blend runs before the step's forward pass: the spans it copies
      // must have been computed by an earlier step.
      if (scheduledPrefill)
        break;
      scheduleBlend(request, requestPlan, segment, output);
      allowance -=
          kv::repairStepTokens(cache.spanOptions(), int64_t(segment.numTokens),
                               output.blends.back().numProbeTokens);
      request.prefilledThisStep = true;
      ++request.runIndex;
      request.blocksDone = 0;
      continue;
    }
    uint32_t take = 0;
    int64_t tokens = 0;
    while (request.blocksDone + take < run.numBlocks) {
      const kv::LogicalBlock &block =
          requestPlan.blocks[run.firstBlock + request.blocksDone + take];
      if (tokens + block.numTokens > allowance && take > 0)
        break;
      if (tokens + block.numTokens > allowance && allowance < blockSize &&
          !output.sequences.empty())
        break;
      tokens += block.numTokens;
      ++take;
    }
    if (take == 0)
      break;
    // A run whose page list extends that of the run just scheduled for
    // this call joins its sequence (kv::ComputeRun::extendsPrevious): one
    // attention sequence instead of one per recomputed block.
    const bool merge = options.mergeComputeRuns && run.extendsPrevious &&
                       request.blocksDone == 0 && openSequence != SIZE_MAX &&
                       openSequence + 1 == output.sequences.size();
    if (!merge) {
      ScheduledSequence &fresh = output.sequences.emplace_back();
      fresh.call = request.call;
      fresh.rows = model::RowKind::Prompt;
      fresh.firstToken = uint32_t(output.tokens.size());
      scheduled.push_back(&request);
    }
    ScheduledSequence &sequence = output.sequences.back();
    sequence.mergedRuns |= merge;
    appendRunTokens(requestPlan, run, request.blocksDone, take, output);
    sequence.numTokens = uint32_t(output.tokens.size()) - sequence.firstToken;
    // A merged sequence reads the pages it had, then this run's others.
    const uint32_t numPages =
        run.numPages - run.numBlocks + request.blocksDone + take;
    appendPages(requestPlan, segment,
                llvm::ArrayRef<uint32_t>(segment.pages)
                    .slice(sequence.numPages, numPages - sequence.numPages),
                output, sequence);
    allowance -= tokens;
    request.blocksDone += take;
    openSequence = SIZE_MAX;
    if (request.blocksDone == run.numBlocks) {
      ++request.runIndex;
      request.blocksDone = 0;
      sequence.completesPrompt = request.runIndex == requestPlan.runs.size();
      openSequence = output.sequences.size() - 1;
    }
    sequence.wantsLogits = sequence.completesPrompt;
    sequence.sample = sequence.completesPrompt;
    scheduledPrefill = true;
  }
}

void Scheduler::appendRunTokens(const kv::RequestPlan &requestPlan,
                                const kv::ComputeRun &run, uint32_t blocksDone,
                                uint32_t take, SchedulerOutput &output) {
  int64_t logicalIndex = run.firstLogicalIndex;
  for (uint32_t b = 0; b < blocksDone; ++b)
    logicalIndex += requestPlan.blocks[run.firstBlock + b].numTokens;
  for (uint32_t b = 0; b < take; ++b) {
    const kv::LogicalBlock &block =
        requestPlan.blocks[run.firstBlock + blocksDone + b];
    for (uint32_t t = 0; t < block.numTokens; ++t) {
      output.tokens.push_back(requestPlan.tokens[block.firstToken + t]);
      // Where its K is computed: a prefix-context span's ReRoPE
      // position right after its prefix, not its place in the call.
      output.positions.push_back(int32_t(block.computePosition + t));
      output.queryIndices.push_back(int32_t(logicalIndex++));
    }
  }
}

void Scheduler::scheduleBlend(const Request &request,
                              const kv::RequestPlan &requestPlan,
                              const kv::SegmentPlan &segment,
                              SchedulerOutput &output) {
  const kv::SpanOptions &span = cache.spanOptions();
  BlendTask &task = output.blends.emplace_back();
  task.call = request.call;
  task.percent = segment.guided ? span.guidedPercent : span.blendPercent;
  task.firstPage = uint32_t(output.blockIds.size());
  task.numContextPages = uint32_t(segment.pages.size()) - segment.numBlocks;
  auto addPage = [&](const kv::LogicalBlock &block) {
    output.blockIds.push_back(int32_t(block.block));
    output.validTokens.push_back(int32_t(block.numTokens));
    output.spanPages.push_back(0);
  };
  for (uint32_t page = 0; page < task.numContextPages; ++page)
    addPage(requestPlan.blocks[segment.pages[page]]);
  task.firstBlock = uint32_t(output.blendBlocks.size());
  task.numBlocks = segment.numBlocks;
  task.firstToken = uint32_t(output.tokens.size());
  for (uint32_t b = 0; b < segment.numBlocks; ++b) {
    const kv::LogicalBlock &block = requestPlan.blocks[segment.firstBlock + b];
    const kv::LogicalBlock &source = requestPlan.blocks[block.blendSource];
    output.blendBlocks.push_back(int32_t(block.block));
    output.sourceBlocks.push_back(int32_t(source.block));
    output.blendValidTokens.push_back(int32_t(block.numTokens));
    output.blendForced.push_back(block.blendForced ? 1 : 0);
    output.blendCandidate.push_back(block.repairCandidate ? 1 : 0);
    output.blendSpan.push_back(source.segment);
    for (uint32_t t = 0; t < block.numTokens; ++t) {
      output.tokens.push_back(requestPlan.tokens[block.firstToken + t]);
      output.positions.push_back(int32_t(block.position + t));
      output.queryIndices.push_back(-1);
    }
  }
  task.numTokens = uint32_t(output.tokens.size()) - task.firstToken;
  if (!segment.guided)
    return;
  // The probe: the segment after the plus, at its place in the call, in
  // its own blocks (computed again after the repair: kv::settleSpanHits).
  task.guided = true;
  task.layers = span.guidedLayers;
  task.granularity = span.guidedGranularity;
  task.neighbours = span.guidedNeighbours;
  const kv::SegmentPlan &probe =
      requestPlan.segments
          [requestPlan.blocks[segment.firstBlock + segment.numBlocks].segment];
  // Tokens it generated before a preemption are not part of the probe
  // (kv::Segment::generatedTokens): its last page is cut after the rest.
  const uint32_t probeTokens = segment.probeTokens;
  task.firstProbeToken = uint32_t(output.tokens.size());
  task.firstProbePage = uint32_t(output.blockIds.size());
  for (uint32_t b = 0, taken = 0; b < probe.numBlocks && taken < probeTokens;
       ++b) {
    const kv::LogicalBlock &block = requestPlan.blocks[probe.firstBlock + b];
    const uint32_t count = std::min(block.numTokens, probeTokens - taken);
    addPage(block);
    output.validTokens.back() = int32_t(count);
    for (uint32_t t = 0; t < count; ++t) {
      output.tokens.push_back(requestPlan.tokens[block.firstToken + t]);
      output.positions.push_back(int32_t(block.position + t));
      output.queryIndices.push_back(-1);
    }
    taken += count;
    ++task.numProbePages;
  }
  task.numProbeTokens = uint32_t(output.tokens.size()) - task.firstProbeToken;
}

void Scheduler::queueSpanMoves() {
  // Spans computed by this step (or earlier) move before the next one.
  for (const auto &request : running)
    if (request->moveSpansAfterStep) {
      request->moveSpansAfterStep = false;
      request->movedBeforeRun = request->runIndex;
      const kv::RequestPlan &plan = cache.plan(request->request);
      cache.relocateComputedSpans(request->request,
                                  plan.runs[request->runIndex].segment);
    }
}

void Scheduler::failStep(const SchedulerOutput &, const std::string &message) {
  copies.clear();
  queueSpanMoves();
  while (!running.empty())
    finish(*running.back(), false, message);
}

void Scheduler::cancel(const std::string &reason) {
  copies.clear();
  queueSpanMoves();
  while (!running.empty())
    finish(*running.back(), false, reason);
  for (size_t id = 0; id < graph.numCalls(); ++id)
    if (!graph.isDone(plan::CallId(id)) && (*outcomes)[id].error.empty())
      (*outcomes)[id].error = reason;
}

void Scheduler::update(const SchedulerOutput &output,
                       const RunnerOutput &result) {
  // After the forward pass, before the next planStep (which applies them).
  queueSpanMoves();

  // Commit, append, flush. Calls that finish are removed afterwards so
  // that `scheduled` stays valid here.
  std::vector<Request *> &finished = finishedScratch;
  std::vector<Request *> &needSlot = needSlotScratch;
  std::vector<Request *> &unsampled = unsampledScratch;
  finished.clear();
  needSlot.clear();
  unsampled.clear();
  const SampledToken *sampled = result.sampled.data();
  const SampledToken *sampledEnd = sampled + result.sampled.size();
  for (size_t s = 0; s < output.sequences.size(); ++s) {
    const ScheduledSequence &sequence = output.sequences[s];
    if (!sequence.wantsLogits)
      continue;
    Request &request = *scheduled[s];
    if (request.finishing) {
      // The fed token's K/V now exist: feed the next, or finish.
      if (request.flushQueue.empty()) {
        finished.push_back(&request);
        continue;
      }
      kv::TokenId next = request.flushQueue.front();
      request.flushQueue.erase(request.flushQueue.begin());
      llvm::Expected<kv::DecodeSlot> slot =
          cache.appendToken(request.request, next);
      if (!slot) {
        // Only the cache's benefit is lost: finish without the rest.
        llvm::consumeError(slot.takeError());
        finished.push_back(&request);
        continue;
      }
      request.pending = next;
      takeSlot(request, *slot);
      continue;
    }
    if (sequence.completesPrompt) {
      cache.commitPrefill(request.request);
      request.decoding = true;
    }
    if (sampled == sampledEnd || sampled->sequence != s) {
      unsampled.push_back(&request); // a runner that broke its contract
      continue;
    }
    const SampledToken &token = *sampled++;
    CallOutcome &outcome = (*outcomes)[request.call];
    if (token.first) {
      request.firstToken = Clock::now();
      outcome.stats.ttftSeconds = secondsSince(graph.readyAt(request.call));
    }
    kv::TokenId next = token.token;
    if (token.stop) {
      // Later calls splice this output in as a whole assistant message
      // (plus-distribute's x ⋈ G(x)): feed what they will see after the
      // fed tokens — the last sampled token unless it ended generation,
      // then the end-of-turn trailer — so their spans find every block of
      // the message in the cache, the partial last one included.
      const auto &trailer = graph.trailer(request.call);
      if (!trailer) {
        finished.push_back(&request);
        continue;
      }
      request.finishing = true;
      request.flushQueue = *trailer;
      if (token.endOfGeneration) {
        if (request.flushQueue.empty()) {
          finished.push_back(&request);
          continue;
        }
        next = request.flushQueue.front();
        request.flushQueue.erase(request.flushQueue.begin());
      }
    }
    llvm::Expected<kv::DecodeSlot> slot =
        cache.appendToken(request.request, next);
    request.pending = next;
    if (slot) {
      takeSlot(request, *slot);
      continue;
    }
    llvm::consumeError(slot.takeError());
    needSlot.push_back(&request);
  }
  for (Request *request : finished)
    finish(*request, true, "");
  for (Request *request : unsampled)
    finish(*request, false, "internal error: no token was sampled");
  // Finished calls freed their blocks; calls that still cannot grow
  // preempt others (never one of them mid-update: that loop is over).
  for (Request *request : needSlot) {
    if (!llvm::any_of(
            running, [&](const auto &other) { return other.get() == request; }))
      continue; // preempted for an earlier one; re-admitted later
    llvm::Expected<kv::DecodeSlot> slot =
        cache.appendToken(request->request, request->pending);
    while (!slot) {
      llvm::consumeError(slot.takeError());
      if (!preemptFor(*request))
        break;
      slot = cache.appendToken(request->request, request->pending);
    }
    if (slot) {
      takeSlot(*request, *slot);
      continue;
    }
    llvm::consumeError(slot.takeError());
    finish(*request, false,
           "the KV cache is full and no other call can be preempted; give "
           "it more room (--kv-cache)");
  }
  scheduled.clear();
}

void Scheduler::takeSlot(Request &request, const kv::DecodeSlot &slot) {
  // The copy-on-write must run before anything else writes K/V:
  // appendToken released the source block, and the next allocation
  // (another call's append, an admission) may recycle it. The next
  // schedule() puts it first in its output; nothing writes K/V before.
  if (slot.copy)
    copies.emplace_back(request.request, *slot.copy);
  request.pendingSlot = slot;
  request.pendingSlot.copy.reset();
}

bool Scheduler::preemptFor(Request &needy) {
  // The most recently admitted other call gives way (vLLM's policy): its
  // blocks are released (and stay cached), and it is re-admitted later
  // with what it generated as part of its prompt.
  Request *victim = nullptr;
  for (const auto &request : running)
    if (request.get() != &needy &&
        (!victim || request->admissionOrder > victim->admissionOrder))
      victim = request.get();
  if (!victim)
    return false;
  if (victim->finishing) {
    // Its answer is complete; only the cache's benefit of the flush is lost.
    finish(*victim, true, "");
    return true;
  }
  CallOutcome &outcome = (*outcomes)[victim->call];
  cache.release(victim->request);
  ++outcome.stats.preemptions;
  // Generated tokens (the pending one included) join the causal tail of
  // the prompt it resumes with, so nothing is generated twice.
  kv::Segment &last = victim->segments.back();
  last.generatedTokens +=
      uint32_t(outcome.tokens.size() - victim->tokensInPrompt);
  last.tokens.insert(last.tokens.end(),
                     outcome.tokens.begin() + victim->tokensInPrompt,
                     outcome.tokens.end());
  victim->tokensInPrompt = outcome.tokens.size();
  requeue(*victim, WaitingFor::Readmission);
  return true;
}

void Scheduler::finish(Request &request, bool succeeded, std::string error) {
  plan::CallId callId = request.call;
  CallOutcome &outcome = (*outcomes)[callId];
  if (cache.contains(request.request))
    cache.release(request.request);
  outcome.succeeded = succeeded;
  outcome.error = std::move(error);
  outcome.stats.totalSeconds = secondsSince(graph.readyAt(callId));
  if (outcome.stats.generatedTokens > 0)
    outcome.stats.decodeSeconds =
        std::chrono::duration<double>(Clock::now() - request.firstToken)
            .count();
  ++callsDone;
  llvm::SmallVector<plan::CallId, 4> ready;
  graph.markDone(callId,
                 succeeded ? std::optional<CallGraph::Tokens>(outcome.tokens)
                           : std::nullopt,
                 ready);
  for (plan::CallId dependent : ready)
    waiting.push(dependent, graph.requestOf(dependent));
  auto found = llvm::find_if(running, [&](const auto &candidate) {
    return candidate.get() == &request;
  });
  if (found != running.end())
    running.erase(found);
}

} // namespace spanc::sched
