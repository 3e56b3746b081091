//===- Executor.cpp - Runs a physical plan on a model and a paged KV cache ===//

#include "runtime/sched/Executor.h"

#include "runtime/kernels/cpu/Limits.h"
#include "runtime/model/ModelIdentity.h"
#include "runtime/model/Sampler.h"

#include "llvm/ADT/ScopeExit.h"

#include <chrono>
#include <deque>
#include <optional>

namespace spanc::sched {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

/// A call admitted to the KV cache.
struct Executor::Active {
  plan::CallId call = 0;
  kv::RequestId request = 0;
  std::vector<kv::Segment> segments; ///< the prompt as admitted
  std::unique_ptr<model::Sampler> sampler;
  /// Index into the plan's runs, and blocks of that run done.
  uint32_t runIndex = 0;
  uint32_t blocksDone = 0;
  bool decoding = false;
  /// ReRoPE: the spans computed at their compute positions were queued for
  /// their move (the run marked afterSpanRelocation may start once the
  /// next step's relocations ran); `moveSpansAfterStep` asks for it.
  bool spansMoved = false;
  bool moveSpansAfterStep = false;
  /// Generation is over; these tokens are still fed for their K/V only, so
  /// later calls that splice the output in find it cached (see step()).
  bool finishing = false;
  std::vector<kv::TokenId> flushQueue;
  /// The sampled token whose K/V the next step computes.
  kv::TokenId pending = -1;
  kv::DecodeSlot pendingSlot;
  /// Generated tokens already folded into `segments` by preemptions.
  size_t tokensInPrompt = 0;
  Clock::time_point firstToken;
  uint64_t admissionOrder = 0;
};

struct Executor::RunState {
  const plan::Plan *plan = nullptr;
  const TokenCallback *onToken = nullptr;
  std::vector<CallOutcome> outcomes;
  std::vector<uint32_t> missingDependencies;
  std::vector<llvm::SmallVector<plan::CallId, 4>> dependents;
  std::vector<Clock::time_point> readyAt;
  std::vector<bool> done;
  std::deque<plan::CallId> ready;
  /// Prompts to re-admit after preemption: the original plus what the call
  /// had generated, with its sampler.
  llvm::DenseMap<plan::CallId, std::unique_ptr<Active>> preempted;
  std::vector<std::unique_ptr<Active>> active;
  /// Output tokens per call, for splicing into later calls.
  std::vector<std::optional<std::vector<kv::TokenId>>> outputs;
  /// Per call: the end-of-turn tokens its consumers put after its output.
  std::vector<std::optional<std::vector<kv::TokenId>>> trailers;
  size_t numDone = 0;
  uint64_t admissions = 0;
  uint64_t tokensGenerated = 0; ///< for ProgressCallback
};

Executor::~Executor() = default;

llvm::Expected<std::unique_ptr<Executor>>
Executor::create(model::Model &model, const model::Tokenizer &tokenizer,
                 const ExecutorOptions &options) {
  // The block size is bounded by the kernels' fixed arrays
  // (runtime/kernels/cpu/Limits.h); KvStorage::create checks it again.
  if (options.blockSize == 0 ||
      options.blockSize > unsigned(cpu::kMaxBlockSize))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block size must be in [1, %d], not %u",
                                   cpu::kMaxBlockSize, options.blockSize);
  if (options.stepTokenBudget < options.blockSize)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the step token budget (%lld) must hold at least one block (%u)",
        static_cast<long long>(options.stepTokenBudget), options.blockSize);
  std::unique_ptr<Executor> executor(new Executor());
  executor->modelPtr = &model;
  executor->tokenizerPtr = &tokenizer;
  executor->executorOptions = options;
  int64_t numBlocks = std::max<int64_t>(
      2, (options.cacheTokens + options.blockSize - 1) / options.blockSize);
  bool keysRotated = options.relocationMode == kv::RelocationMode::Rerope;
  auto storage = kv::KvStorage::create(
      model.kvStorageConfig(numBlocks, int(options.blockSize), keysRotated));
  if (!storage)
    return storage.takeError();
  executor->storage = std::move(*storage);
  executor->blockPool =
      std::make_unique<kv::BlockPool>(uint32_t(numBlocks), options.blockSize);
  executor->cacheManager = std::make_unique<kv::KvCacheManager>(
      *executor->blockPool, kv::BlockHasher(model::modelIdentity(model.file())),
      options.cacheMode, options.relocationMode, options.spanOptions);

  executor->relocation = std::make_unique<kv::RelocationExecutor>(
      *executor->storage, model.ropeConfig());
  return executor;
}

std::vector<CallOutcome> Executor::run(const plan::Plan &plan,
                                       const TokenCallback &onToken,
                                       const ProgressCallback &onProgress) {
  RunState state;
  state.plan = &plan;
  state.onToken = &onToken;
  const size_t numCalls = plan.calls.size();
  state.outcomes.resize(numCalls);
  state.missingDependencies.resize(numCalls);
  state.dependents.resize(numCalls);
  state.readyAt.resize(numCalls);
  state.done.assign(numCalls, false);
  state.outputs.resize(numCalls);
  state.trailers.resize(numCalls);
  for (const plan::Call &call : plan.calls)
    for (const plan::PlanSegment &segment : call.segments)
      for (const plan::Piece &piece : segment.pieces)
        if (piece.call && !state.trailers[*piece.call])
          state.trailers[*piece.call] = piece.trailer;
  for (const plan::Call &call : plan.calls) {
    state.missingDependencies[call.id] = uint32_t(call.dependencies.size());
    for (plan::CallId dependency : call.dependencies)
      state.dependents[dependency].push_back(call.id);
    if (call.dependencies.empty()) {
      state.ready.push_back(call.id);
      state.readyAt[call.id] = Clock::now();
    }
  }

  while (state.numDone < numCalls) {
    bool admittedAny = admitReady(state);
    if (state.active.empty()) {
      if (!admittedAny && state.ready.empty())
        break; // nothing can make progress (should not happen)
      continue;
    }
    if (llvm::Error error = step(state)) {
      // A step failed as a whole (a malformed batch): fail what ran in it.
      std::string message = llvm::toString(std::move(error));
      while (!state.active.empty())
        finish(state, *state.active.back(), false, message);
    }
    if (onProgress)
      onProgress({state.numDone, numCalls, state.tokensGenerated});
  }
  for (size_t id = 0; id < numCalls; ++id)
    if (!state.done[id])
      state.outcomes[id].error = "not run: the plan could not make progress";
  return std::move(state.outcomes);
}

bool Executor::admitReady(RunState &state) {
  bool admittedAny = false;
  // Calls held back for blocks in flight go back to the front, in order,
  // however this returns.
  std::deque<plan::CallId> heldBack;
  auto restoreHeldBack = llvm::make_scope_exit([&] {
    state.ready.insert(state.ready.begin(), heldBack.begin(), heldBack.end());
  });
  while (!state.ready.empty()) {
    plan::CallId callId = state.ready.front();
    const plan::Call &call = state.plan->calls[callId];

    std::unique_ptr<Active> active;
    auto preempted = state.preempted.find(callId);
    if (preempted != state.preempted.end()) {
      active = std::move(preempted->second);
      state.preempted.erase(preempted);
    } else {
      active = std::make_unique<Active>();
      active->call = callId;
      std::optional<std::vector<kv::Segment>> segments =
          plan::resolveCall(call, state.outputs);
      if (!segments) {
        state.ready.pop_front();
        finish(state, *active, false,
               "an output it splices in is missing (a call it depends on "
               "failed)");
        continue;
      }
      active->segments = std::move(*segments);
      model::SamplingParams params;
      params.temperature = float(call.options.temperature);
      params.topK = int(call.options.topK);
      params.topP = float(call.options.topP);
      params.seed = call.options.seed;
      active->sampler = std::make_unique<model::Sampler>(params);
    }

    if (executorOptions.shareInFlightBlocks &&
        cacheManager->needsBlocksInFlight(active->segments)) {
      state.preempted[callId] = std::move(active);
      state.ready.pop_front();
      heldBack.push_back(callId);
      continue;
    }

    // Admission control: besides its prompt (which admit() checks), a call
    // needs room to grow to max_tokens, and so do the running ones. Taking
    // that into account up front keeps preemption (which recomputes, and so
    // may change a greedy near-tie) for when the estimate is wrong.
    if (!state.active.empty()) {
      uint64_t needed = growthBlocks(state, *active);
      for (const kv::Segment &segment : active->segments)
        needed += (segment.tokens.size() + executorOptions.blockSize - 1) /
                  executorOptions.blockSize;
      for (const auto &running : state.active)
        needed += growthBlocks(state, *running);
      if (needed > blockPool->numFreeBlocks()) {
        state.preempted[callId] = std::move(active);
        return admittedAny; // retry when a running call releases blocks
      }
    }
    active->request = nextRequestId++;
    kv::AdmitResult result =
        cacheManager->admit(active->request, active->segments);
    if (result.status == kv::AdmitStatus::Wait && !state.active.empty()) {
      state.preempted[callId] = std::move(active);
      return admittedAny; // retry when a running call releases blocks
    }
    state.ready.pop_front();
    if (result.status != kv::AdmitStatus::Admitted) {
      state.active.push_back(std::move(active));
      finish(state, *state.active.back(), false,
             "the KV cache cannot hold this call: " + result.reason);
      continue;
    }
    const kv::RequestPlan &requestPlan = cacheManager->plan(active->request);
    CallStats &stats = state.outcomes[callId].stats;
    active->admissionOrder = state.admissions++;
    active->runIndex = 0;
    active->blocksDone = 0;
    active->decoding = false;
    active->spansMoved = false;
    active->moveSpansAfterStep = false;
    stats.queuedSeconds = secondsSince(state.readyAt[callId]);
    if (stats.preemptions == 0) {
      // (Re-)admission after a deferral counts the final layout only.
      stats.promptTokens = requestPlan.numPromptTokens;
      stats.reusedTokens = requestPlan.numReusedTokens;
      stats.computedTokens =
          requestPlan.numPromptTokens - requestPlan.numReusedTokens;
      stats.relocatedTokens = 0;
      for (const kv::LogicalBlock &block : requestPlan.blocks)
        if (block.reused &&
            blockPool->storedPosition(block.block) != block.position &&
            executorOptions.relocationMode == kv::RelocationMode::Rerope)
          stats.relocatedTokens += block.numTokens;
    }
    if (requestPlan.runs.empty() || requestPlan.runs.back().firstToken +
                                            requestPlan.runs.back().numTokens !=
                                        requestPlan.numPromptTokens) {
      // Every block hit: nothing produces the logits of the last prompt
      // token. The cache manager keeps the last block a miss; this guards
      // that contract.
      cacheManager->release(active->request);
      state.active.push_back(std::move(active));
      finish(state, *state.active.back(), false,
             "internal error: the last prompt block was not scheduled for "
             "computation");
      continue;
    }
    state.active.push_back(std::move(active));
    admittedAny = true;
  }
  return admittedAny;
}

uint64_t Executor::growthBlocks(const RunState &state,
                                const Active &active) const {
  const plan::Call &call = state.plan->calls[active.call];
  int64_t remaining = call.options.maxTokens -
                      int64_t(state.outcomes[active.call].tokens.size()) + 1;
  // One more for the copy-on-write of a cached or shared last block.
  return uint64_t(std::max<int64_t>(remaining, 0) + executorOptions.blockSize -
                  1) /
             executorOptions.blockSize +
         1;
}

llvm::Error Executor::applyRelocations(RunState &state) {
  llvm::Expected<kv::StepPlan> stepPlan = cacheManager->planStep();
  if (!stepPlan)
    return stepPlan.takeError();
  relocation->apply(stepPlan->relocation);
  cacheManager->finishStep(*stepPlan);
  // Requests whose duplicates did not fit were released: admit them again.
  for (kv::RequestId request : llvm::reverse(stepPlan->deferred)) {
    auto found = llvm::find_if(state.active, [&](const auto &active) {
      return active->request == request;
    });
    if (found == state.active.end())
      continue;
    state.ready.push_front((*found)->call);
    state.preempted[(*found)->call] = std::move(*found);
    state.active.erase(found);
  }
  return llvm::Error::success();
}

/// The forward inputs of one step; vectors own what ForwardSequence views.
struct Executor::StepBatch {
  struct Entry {
    Active *active = nullptr;
    bool completesPrompt = false;
    bool isDecode = false;
    std::vector<int32_t> tokens, positions, blockIds, validTokens;
  };
  std::deque<Entry> entries; // stable addresses while we append
};

namespace {

void appendPages(const kv::RequestPlan &plan, llvm::ArrayRef<uint32_t> pages,
                 std::vector<int32_t> &blockIds,
                 std::vector<int32_t> &validTokens) {
  for (uint32_t page : pages) {
    blockIds.push_back(int32_t(plan.blocks[page].block));
    validTokens.push_back(int32_t(plan.blocks[page].numTokens));
  }
}

} // namespace

llvm::Error Executor::step(RunState &state) {
  if (llvm::Error error = applyRelocations(state))
    return error;
  if (state.active.empty())
    return llvm::Error::success();

  StepBatch batch;
  int64_t budget = executorOptions.stepTokenBudget;
  // Decode first: one token for every generating call.
  for (size_t index = 0; index < state.active.size(); ++index) {
    Active &active = *state.active[index];
    if (!active.decoding)
      continue;
    const kv::RequestPlan &plan = cacheManager->plan(active.request);
    StepBatch::Entry &entry = batch.entries.emplace_back();
    entry.active = &active;
    entry.isDecode = true;
    entry.tokens.push_back(active.pending);
    entry.positions.push_back(int32_t(active.pendingSlot.position));
    appendPages(plan, plan.segments.back().pages, entry.blockIds,
                entry.validTokens);
    --budget;
  }
  // Then prefill, whole blocks at a time, oldest call first.
  const unsigned blockSize = executorOptions.blockSize;
  for (size_t index = 0; index < state.active.size() && budget > 0; ++index) {
    Active &active = *state.active[index];
    if (active.decoding)
      continue;
    const kv::RequestPlan &plan = cacheManager->plan(active.request);
    while (budget > 0 && active.runIndex < plan.runs.size()) {
      const kv::ComputeRun &run = plan.runs[active.runIndex];
      if (run.afterSpanRelocation && !active.spansMoved) {
        // Its spans were computed after their prefix, at other positions
        // than they take here: they move first (after this step's forward
        // pass, which may be computing them).
        active.moveSpansAfterStep = true;
        break;
      }
      const kv::SegmentPlan &segment = plan.segments[run.segment];
      uint32_t take = 0;
      int64_t tokens = 0;
      while (active.blocksDone + take < run.numBlocks) {
        const kv::LogicalBlock &block =
            plan.blocks[run.firstBlock + active.blocksDone + take];
        if (tokens + block.numTokens > budget && take > 0)
          break;
        if (tokens + block.numTokens > budget && budget < blockSize &&
            !batch.entries.empty())
          break;
        tokens += block.numTokens;
        ++take;
      }
      if (take == 0)
        break;
      StepBatch::Entry &entry = batch.entries.emplace_back();
      entry.active = &active;
      for (uint32_t b = 0; b < take; ++b) {
        const kv::LogicalBlock &block =
            plan.blocks[run.firstBlock + active.blocksDone + b];
        for (uint32_t t = 0; t < block.numTokens; ++t) {
          entry.tokens.push_back(plan.tokens[block.firstToken + t]);
          entry.positions.push_back(int32_t(block.computePosition + t));
        }
      }
      uint32_t numPages =
          run.numPages - run.numBlocks + active.blocksDone + take;
      appendPages(plan,
                  llvm::ArrayRef<uint32_t>(segment.pages).take_front(numPages),
                  entry.blockIds, entry.validTokens);
      budget -= tokens;
      active.blocksDone += take;
      if (active.blocksDone == run.numBlocks) {
        ++active.runIndex;
        active.blocksDone = 0;
        entry.completesPrompt = active.runIndex == plan.runs.size();
      }
    }
  }
  // Spans computed by this step (or earlier) move before the next one.
  auto queueSpanMoves = llvm::make_scope_exit([&] {
    for (const auto &active : state.active)
      if (active->moveSpansAfterStep) {
        active->moveSpansAfterStep = false;
        active->spansMoved = true;
        cacheManager->relocateComputedSpans(active->request);
      }
  });
  if (batch.entries.empty())
    return llvm::Error::success();

  llvm::SmallVector<model::ForwardSequence, 8> sequences;
  for (const StepBatch::Entry &entry : batch.entries) {
    model::ForwardSequence sequence;
    sequence.tokens = entry.tokens;
    sequence.positions = entry.positions;
    sequence.blockIds = entry.blockIds;
    sequence.validTokens = entry.validTokens;
    sequence.logits = entry.isDecode || entry.completesPrompt
                          ? model::LogitsRequest::Last
                          : model::LogitsRequest::None;
    sequence.rows =
        entry.isDecode ? model::RowKind::Decode : model::RowKind::Prompt;
    sequences.push_back(sequence);
  }
  model::ForwardOutput output;
  if (llvm::Error error = modelPtr->forward(sequences, *storage, output))
    return error;

  // Sample, stream, append. Calls that finish are removed afterwards so
  // that active indices stay valid here.
  llvm::SmallVector<Active *, 4> finished, needSlot;
  for (size_t s = 0; s < batch.entries.size(); ++s) {
    const StepBatch::Entry &entry = batch.entries[s];
    if (!entry.isDecode && !entry.completesPrompt)
      continue;
    Active &active = *entry.active;
    const plan::Call &call = state.plan->calls[active.call];
    CallOutcome &outcome = state.outcomes[active.call];
    if (active.finishing) {
      // The fed token's K/V now exist: feed the next, or finish.
      if (active.flushQueue.empty()) {
        finished.push_back(&active);
        continue;
      }
      kv::TokenId next = active.flushQueue.front();
      active.flushQueue.erase(active.flushQueue.begin());
      llvm::Expected<kv::DecodeSlot> slot =
          cacheManager->appendToken(active.request, next);
      if (!slot) {
        // Only the cache's benefit is lost: finish without the rest.
        llvm::consumeError(slot.takeError());
        finished.push_back(&active);
        continue;
      }
      active.pending = next;
      takeSlot(active, *slot);
      continue;
    }
    if (entry.completesPrompt) {
      cacheManager->commitPrefill(active.request);
      active.decoding = true;
    }
    int64_t rowIndex = output.rowOffsets[s];
    if (entry.completesPrompt && executorOptions.keepFirstLogits &&
        outcome.firstLogits.empty())
      outcome.firstLogits.assign(output.row(rowIndex),
                                 output.row(rowIndex) + output.vocabSize);
    kv::TokenId token = active.sampler->sample(
        llvm::ArrayRef<float>(output.row(rowIndex), size_t(output.vocabSize)));
    if (outcome.tokens.empty() && outcome.stats.generatedTokens == 0) {
      active.firstToken = Clock::now();
      outcome.stats.ttftSeconds = secondsSince(state.readyAt[active.call]);
    }

    const bool endOfGeneration = tokenizerPtr->isEndOfGeneration(token);
    bool stop = endOfGeneration;
    if (!stop) {
      outcome.tokens.push_back(token);
      ++outcome.stats.generatedTokens;
      ++state.tokensGenerated;
      std::string piece = tokenizerPtr->tokenToPiece(token, false);
      outcome.text += piece;
      if (*state.onToken && !call.cacheOnly)
        (*state.onToken)(active.call, piece);
      for (const std::string &stopText : call.options.stop)
        if (!stopText.empty() &&
            llvm::StringRef(outcome.text).endswith(stopText))
          stop = true;
      if (int64_t(outcome.tokens.size()) >= call.options.maxTokens)
        stop = true;
    }
    if (stop) {
      // Later calls splice this output in as a whole assistant message
      // (plus-distribute's x ⋈ G(x)): feed what they will see after the
      // fed tokens — the last sampled token unless it ended generation,
      // then the end-of-turn trailer — so their spans find every block of
      // the message in the cache, the partial last one included.
      const auto &trailer = state.trailers[active.call];
      if (!trailer) {
        finished.push_back(&active);
        continue;
      }
      active.finishing = true;
      active.flushQueue = *trailer;
      if (endOfGeneration) {
        if (active.flushQueue.empty()) {
          finished.push_back(&active);
          continue;
        }
        token = active.flushQueue.front();
        active.flushQueue.erase(active.flushQueue.begin());
      }
    }
    llvm::Expected<kv::DecodeSlot> slot =
        cacheManager->appendToken(active.request, token);
    active.pending = token;
    if (slot) {
      takeSlot(active, *slot);
      continue;
    }
    llvm::consumeError(slot.takeError());
    needSlot.push_back(&active);
  }
  for (Active *active : finished)
    finish(state, *active, true, "");
  // Finished calls freed their blocks; calls that still cannot grow
  // preempt others (never one of them mid-update: that loop is over).
  for (Active *active : needSlot) {
    if (!llvm::any_of(state.active,
                      [&](const auto &other) { return other.get() == active; }))
      continue; // preempted for an earlier one; re-admitted later
    llvm::Expected<kv::DecodeSlot> slot =
        cacheManager->appendToken(active->request, active->pending);
    while (!slot) {
      llvm::consumeError(slot.takeError());
      if (!preemptFor(state, *active))
        break;
      slot = cacheManager->appendToken(active->request, active->pending);
    }
    if (slot) {
      takeSlot(*active, *slot);
      continue;
    }
    llvm::consumeError(slot.takeError());
    finish(state, *active, false,
           "the KV cache is full and no other call can be preempted; give "
           "it more room (--kv-cache)");
  }
  return llvm::Error::success();
}

void Executor::takeSlot(Active &active, const kv::DecodeSlot &slot) {
  // Copy-on-write now: appendToken released the source block, and the next
  // allocation (another call's append, an admission) may recycle it.
  relocation->prepare(slot);
  active.pendingSlot = slot;
  active.pendingSlot.copy.reset();
}

bool Executor::preemptFor(RunState &state, Active &needy) {
  // The most recently admitted other call gives way (vLLM's policy): its
  // blocks are released (and stay cached), and it is re-admitted later
  // with what it generated as part of its prompt.
  Active *victim = nullptr;
  for (const auto &active : state.active)
    if (active.get() != &needy &&
        (!victim || active->admissionOrder > victim->admissionOrder))
      victim = active.get();
  if (!victim)
    return false;
  if (victim->finishing) {
    // Its answer is complete; only the cache's benefit of the flush is lost.
    finish(state, *victim, true, "");
    return true;
  }
  CallOutcome &outcome = state.outcomes[victim->call];
  cacheManager->release(victim->request);
  ++outcome.stats.preemptions;
  // Generated tokens (the pending one included) join the causal tail of
  // the prompt it resumes with, so nothing is generated twice.
  std::vector<kv::TokenId> &tail = victim->segments.back().tokens;
  tail.insert(tail.end(), outcome.tokens.begin() + victim->tokensInPrompt,
              outcome.tokens.end());
  victim->tokensInPrompt = outcome.tokens.size();
  auto found = llvm::find_if(
      state.active, [&](const auto &active) { return active.get() == victim; });
  state.ready.push_front(victim->call);
  state.preempted[victim->call] = std::move(*found);
  state.active.erase(found);
  return true;
}

void Executor::finish(RunState &state, Active &active, bool succeeded,
                      std::string error) {
  plan::CallId callId = active.call;
  CallOutcome &outcome = state.outcomes[callId];
  if (cacheManager->contains(active.request))
    cacheManager->release(active.request);
  outcome.succeeded = succeeded;
  outcome.error = std::move(error);
  outcome.stats.totalSeconds = secondsSince(state.readyAt[callId]);
  if (outcome.stats.generatedTokens > 0)
    outcome.stats.decodeSeconds =
        std::chrono::duration<double>(Clock::now() - active.firstToken).count();
  state.done[callId] = true;
  ++state.numDone;
  if (succeeded)
    state.outputs[callId] = outcome.tokens;
  for (plan::CallId dependent : state.dependents[callId]) {
    if (--state.missingDependencies[dependent] == 0) {
      state.ready.push_back(dependent);
      state.readyAt[dependent] = Clock::now();
    }
  }
  auto found = llvm::find_if(state.active, [&](const auto &candidate) {
    return candidate.get() == &active;
  });
  if (found != state.active.end())
    state.active.erase(found);
}

} // namespace spanc::sched
