//===- Executor.cpp - Runs a physical plan on a model and a paged KV cache ===//

#include "runtime/sched/Executor.h"

#include "runtime/backend/BackendFactory.h"
#include "runtime/kernels/Limits.h"
#include "runtime/model/ModelIdentity.h"
#include "runtime/sched/ModelRunner.h"
#include "runtime/sched/Scheduler.h"
#include "runtime/sched/SchedulerOutput.h"

#include <algorithm>
#include <cassert>

namespace spanc::sched {

Executor::Executor() = default;
Executor::~Executor() = default;

llvm::Expected<std::unique_ptr<Executor>>
Executor::create(model::Model &model, const model::Tokenizer &tokenizer,
                 const ExecutorOptions &options) {
  // The block size is bounded by the kernels' fixed arrays
  // (runtime/kernels/Limits.h); KvStorage::create checks it again.
  if (options.blockSize == 0 ||
      options.blockSize > unsigned(kernels::kMaxBlockSize))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block size must be in [1, %d], not %u",
                                   kernels::kMaxBlockSize, options.blockSize);
  if (options.stepTokenBudget < options.blockSize)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the step token budget (%lld) must hold at least one block (%u)",
        static_cast<long long>(options.stepTokenBudget), options.blockSize);
  // Found at start rather than as a failed step: the CUDA attention kernel
  // does not scale spans (runtime/backend/CudaBackend.h).
  if (options.device == backend::Device::Cuda &&
      options.spanOptions.scalesSpans())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "span scaling (--span-temperature, --span-mass-scale) runs on the "
        "CPU backend only; use --device=cpu");
  if (options.device == backend::Device::Cuda &&
      options.spanOptions.guidedPercent != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "question-guided span repair (--span-guided) runs on the CPU backend "
        "only; use --device=cpu");
  if (llvm::Error error = kv::checkSpanOptions(options.spanOptions))
    return error;
  std::unique_ptr<Executor> executor(new Executor());
  executor->executorOptions = options;
  int64_t numBlocks = std::max<int64_t>(
      2, (options.cacheTokens + options.blockSize - 1) / options.blockSize);
  backend::BackendOptions backendOptions;
  backendOptions.device = options.device;
  backendOptions.numBlocks = numBlocks;
  backendOptions.blockSize = options.blockSize;
  backendOptions.keysRotated =
      options.relocationMode == kv::RelocationMode::Rerope;
  backendOptions.prefaultKv = options.prefaultKv;
  auto device = backend::createBackend(model, backendOptions);
  if (!device)
    return device.takeError();
  executor->device = std::move(*device);
  executor->blockPool =
      std::make_unique<kv::BlockPool>(uint32_t(numBlocks), options.blockSize);
  executor->cacheManager = std::make_unique<kv::KvCacheManager>(
      *executor->blockPool, kv::BlockHasher(model::modelIdentity(model.file())),
      options.cacheMode, options.relocationMode, options.spanOptions);

  SchedulerOptions schedulerOptions;
  schedulerOptions.blockSize = options.blockSize;
  schedulerOptions.stepTokenBudget = options.stepTokenBudget;
  schedulerOptions.shareInFlightBlocks = options.shareInFlightBlocks;
  schedulerOptions.contextLength = model.config().contextLength;
  schedulerOptions.fairness = options.fairness;
  // The CUDA backend and llama.cpp's attention take no query indices.
  schedulerOptions.mergeComputeRuns =
      options.device == backend::Device::Cpu &&
      model.numerics() != model::Numerics::LlamaCpp;
  executor->scheduler = std::make_unique<Scheduler>(
      *executor->cacheManager, *executor->blockPool, schedulerOptions);
  executor->runner = std::make_unique<ModelRunner>(*executor->device, tokenizer,
                                                   options.keepFirstLogits,
                                                   model.config().numLayers);
  executor->device->setProfiling(options.profile);
  executor->stepOutput = std::make_unique<SchedulerOutput>();
  executor->runnerOutput = std::make_unique<RunnerOutput>();
  return executor;
}

const backend::KvStorage &Executor::kvStorage() const {
  const backend::KvStorage *storage = device->hostStorage();
  assert(storage && "kvStorage() of a backend whose K/V is not in host memory");
  return *storage;
}

void Executor::beginSession(const plan::Plan &plan,
                            std::vector<CallOutcome> &outcomes,
                            const TokenCallback &onToken) {
  // The runner keeps a pointer to the callback: the session owns a copy.
  sessionOnToken = onToken;
  scheduler->beginRun(plan, outcomes);
  runner->beginRun(plan, outcomes, sessionOnToken);
}

void Executor::addCalls(RequestTag request) {
  scheduler->addCalls(request);
  runner->addCalls();
}

void Executor::endSession() {
  scheduler->endRun();
  runner->endRun();
}

PhaseProfile Executor::profile() const {
  PhaseProfile result = phaseTimes;
  result += scheduler->phases();
  result += runner->phases();
  const kv::CacheProfile &cache = cacheManager->profile();
  result.layouts = cache.layouts;
  result.admissions = cache.admissions;
  result.layoutSeconds = cache.layoutSeconds;
  result.lookupSeconds = cache.admitSeconds;
  // The scheduler's admission time holds the cache manager's.
  result.admissionSeconds = std::max(
      0.0, result.admissionSeconds - cache.layoutSeconds - cache.admitSeconds);
  result.forward = device->profile();
  return result;
}

void Executor::resetProfile() {
  phaseTimes = PhaseProfile();
  scheduler->resetPhases();
  runner->resetPhases();
  cacheManager->resetProfile();
  device->resetProfile();
}

bool Executor::step() {
  const auto start = std::chrono::steady_clock::now();
  llvm::Error error = scheduler->schedule(*stepOutput);
  if (!error && !scheduler->hasRunning() && stepOutput->empty())
    return false;
  runScheduled(std::move(error), start);
  return true;
}

void Executor::cancelCall(plan::CallId call, const std::string &reason) {
  scheduler->cancelCall(call, reason);
}

bool Executor::isDone(plan::CallId call) const {
  return scheduler->isDone(call);
}

size_t Executor::numRunning() const { return scheduler->numRunning(); }

size_t Executor::numWaiting() const { return scheduler->numWaiting(); }

void Executor::runScheduled(llvm::Error error,
                            std::chrono::steady_clock::time_point start) {
  SchedulerOutput &step = *stepOutput;
  RunnerOutput &result = *runnerOutput;
  ++phaseTimes.steps;
  if (!error)
    error = runner->execute(step, result);
  auto mark = std::chrono::steady_clock::now();
  if (error) {
    // A step failed as a whole (a malformed batch): fail what ran in it.
    scheduler->failStep(step, llvm::toString(std::move(error)));
  } else {
    scheduler->update(step, result);
  }
  lap(mark, phaseTimes.updateSeconds);
  phaseTimes.stepSeconds += std::chrono::duration<double>(mark - start).count();
}

std::vector<CallOutcome> Executor::run(const plan::Plan &plan,
                                       const TokenCallback &onToken,
                                       const ProgressCallback &onProgress,
                                       const StopCallback &shouldStop) {
  std::vector<CallOutcome> outcomes;
  beginSession(plan, outcomes, onToken);
  const size_t numCalls = plan.calls.size();
  while (scheduler->numDone() < numCalls) {
    if (shouldStop && shouldStop()) {
      scheduler->cancel("interrupted");
      break;
    }
    const auto start = std::chrono::steady_clock::now();
    llvm::Error error = scheduler->schedule(*stepOutput);
    if (!error && !scheduler->hasRunning() && stepOutput->empty()) {
      if (stepOutput->admittedCalls == 0 && !scheduler->hasWaiting())
        break; // nothing can make progress (should not happen)
      continue;
    }
    runScheduled(std::move(error), start);
    if (onProgress)
      onProgress({scheduler->numDone(), numCalls, runner->tokensGenerated()});
  }
  endSession();
  return outcomes;
}

} // namespace spanc::sched
