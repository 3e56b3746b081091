//===- Executor.h - Runs a physical plan on a model and a paged KV cache --===//
//
// The fork/join executor of docs/ARCHITECTURE.md, "Running a plan": the
// public face of the runtime. It owns the pieces — the KV cache manager and
// block pool, a Backend (K/V memory and the model's forward pass, on the
// device ExecutorOptions::device names), the Scheduler that decides each
// step and the ModelRunner that runs it — and loops schedule (admission
// included) → run → update until every call of the plan finished or failed.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_EXECUTOR_H
#define SPANC_RUNTIME_SCHED_EXECUTOR_H

#include "plan/Plan.h"
#include "runtime/backend/Device.h"
#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/CallOutcome.h"
#include "runtime/sched/Fairness.h"
#include "runtime/sched/PhaseProfile.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace spanc::backend {
class Backend;
} // namespace spanc::backend

namespace spanc::sched {

class ModelRunner;
class Scheduler;
struct SchedulerOutput;
struct RunnerOutput;

struct ExecutorOptions {
  /// Where the forward pass and the K/V memory live (--device): the CPU
  /// backend by default, or the CUDA backend (backend::createBackend).
  backend::Device device = backend::Device::Cpu;
  kv::CacheMode cacheMode = kv::CacheMode::Span;
  /// rope-in-kernel by default: K is stored unrotated, so a cached block is
  /// bit-identical wherever it is reused and answers never depend on what
  /// the cache held. rerope rotates stored K by the position delta and
  /// rounds it again to the storage precision (f16 by default: ~5e-4
  /// relative; f32: ~1e-7), which can flip a greedy near-tie.
  kv::RelocationMode relocationMode = kv::RelocationMode::RopeInKernel;
  /// What spans attend to and whether their heads are recomputed
  /// (--span-context, --span-recompute).
  kv::SpanOptions spanOptions;
  /// Tokens per KV block, in [1, kernels::kMaxBlockSize]
  /// (runtime/kernels/Limits.h).
  unsigned blockSize = 16;
  /// KV cache capacity in tokens (rounded up to whole blocks).
  int64_t cacheTokens = 65536;
  /// Fault the whole K/V pool in when the executor is made, so that no
  /// request pays for first touching it (a server, a benchmark of
  /// per-request latency); off, memory is taken as blocks are first
  /// written (backend::KvStorageConfig::prefault).
  bool prefaultKv = false;
  /// Tokens one forward step may process (decode tokens + prefill chunks).
  int64_t stepTokenBudget = 512;
  /// Keep each call's first-token logits in its outcome.
  bool keepFirstLogits = false;
  /// Hold a ready call back while a block it would miss is being computed
  /// by a running call (in-flight sharing): admitted a step or two later,
  /// it hits that block instead of computing it again. Other ready calls
  /// are admitted past it. Off: concurrent calls that share a cold span
  /// each compute it.
  bool shareInFlightBlocks = true;
  /// Per-request caps on running calls and prompt tokens per step, for a
  /// session whose requests compete (spanc serve); none by default, and a
  /// plain run is one request.
  FairnessOptions fairness;
  /// Time every op of the forward pass too (profile()'s `forward`): a
  /// clock read per op and layer. The phases are always timed.
  bool profile = false;
};

class Executor {
public:
  /// Sizes the KV storage and block pool for `model`. The cache outlives
  /// every run(), so later plans hit what earlier ones left.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(model::Model &model, const model::Tokenizer &tokenizer,
         const ExecutorOptions &options);
  ~Executor();

  /// Runs every call of `plan` to completion (or failure) and returns one
  /// outcome per call, indexed by CallId. `shouldStop` is asked between
  /// steps: once it says true, the calls not finished fail ("interrupted")
  /// and their blocks go back to the pool, so the cache stays usable.
  std::vector<CallOutcome> run(const plan::Plan &plan,
                               const TokenCallback &onToken = nullptr,
                               const ProgressCallback &onProgress = nullptr,
                               const StopCallback &shouldStop = nullptr);

  /// A session: a run whose plan grows while it runs (a server's requests),
  /// driven one step at a time. run() is a session over a fixed plan.
  /// `plan` and `outcomes` must outlive the session; calls appended to
  /// `plan` join it at addCalls(), outcomes grow with them.
  void beginSession(const plan::Plan &plan, std::vector<CallOutcome> &outcomes,
                    const TokenCallback &onToken);
  /// Takes in the calls appended to the session's plan since the last call
  /// (their ids are their indices), all serving `request` (admission is
  /// fair across requests: Fairness.h). Between steps only.
  void addCalls(RequestTag request = 0);
  /// Admits what it can and runs one step. Returns false when there was
  /// nothing to run (every call done, or none can be admitted now).
  bool step();
  /// Cancels one call between steps (see Scheduler::cancelCall).
  void cancelCall(plan::CallId call, const std::string &reason);
  bool isDone(plan::CallId call) const;
  size_t numRunning() const;
  /// Calls ready but not admitted (queued, held back or preempted).
  size_t numWaiting() const;
  /// Marks the calls never run and ends the session.
  void endSession();

  const ExecutorOptions &options() const { return executorOptions; }
  kv::BlockPool &pool() { return *blockPool; }
  /// The K/V memory (tests compare what relocation left there); only for
  /// a backend whose K/V lives in host memory (the CPU's).
  const backend::KvStorage &kvStorage() const;
  /// Where the steps since the last resetProfile spent their time, by
  /// phase (and by op of the forward pass with ExecutorOptions::profile).
  PhaseProfile profile() const;
  void resetProfile();

  /// The hasher every plan's block hashes come from.
  const kv::BlockHasher &hasher() const { return cacheManager->hasher(); }

private:
  Executor();
  /// Runs the step schedule() laid out in stepOutput (from `start`), then
  /// update(); or, when scheduling or the runner failed, fails the step's
  /// calls.
  void runScheduled(llvm::Error error,
                    std::chrono::steady_clock::time_point start);

  ExecutorOptions executorOptions;
  std::unique_ptr<kv::BlockPool> blockPool;
  std::unique_ptr<kv::KvCacheManager> cacheManager;
  /// The device: K/V memory, relocations and the forward pass.
  std::unique_ptr<backend::Backend> device;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ModelRunner> runner;
  /// Reused by every step (no per-token allocation in the steady state).
  std::unique_ptr<SchedulerOutput> stepOutput;
  std::unique_ptr<RunnerOutput> runnerOutput;
  /// The session's streaming callback (the runner points to it).
  TokenCallback sessionOnToken;
  /// The executor's own phases: steps, updates, their whole time.
  PhaseProfile phaseTimes;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_EXECUTOR_H
