//===- Executor.h - Runs a physical plan on a model and a paged KV cache --===//
//
// The fork/join executor and continuous-batching scheduler of DESIGN §6.
// A call of the plan becomes ready when the calls it splices in have
// finished; ready calls are admitted to the KV cache manager in plan order
// (waiting when the cache is full, never corrupting it). Each step then
// (1) applies the step's CIDRA relocation plan, (2) builds one forward
// batch under a token budget — a decode token for every generating call
// first, so long prefills never stall running decodes, then prefill chunks
// of whole blocks — and (3) samples, streams and appends the new tokens.
// A call that cannot grow when the cache is full preempts the most recently
// admitted other call, which is re-admitted later with the tokens it had
// generated as part of its prompt: no work is lost.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_EXECUTOR_H
#define SPANC_RUNTIME_SCHED_EXECUTOR_H

#include "plan/Plan.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/kv/KvStorage.h"
#include "runtime/kv/RelocationExecutor.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace spanc::sched {

struct ExecutorOptions {
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
  /// Tokens per KV block, in [1, cpu::kMaxBlockSize]
  /// (runtime/kernels/cpu/Limits.h).
  unsigned blockSize = 16;
  /// KV cache capacity in tokens (rounded up to whole blocks).
  int64_t cacheTokens = 65536;
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
};

/// Per-call figures for --stats.
struct CallStats {
  double queuedSeconds = 0; ///< ready → admitted
  double ttftSeconds = 0;   ///< ready → first token sampled
  double totalSeconds = 0;  ///< ready → finished
  uint32_t promptTokens = 0;
  uint32_t computedTokens = 0;  ///< prompt tokens prefilled
  uint32_t reusedTokens = 0;    ///< prompt tokens found in the cache
  uint32_t relocatedTokens = 0; ///< reused tokens whose K was re-rotated
  uint32_t generatedTokens = 0;
  uint32_t preemptions = 0;
  double decodeSeconds = 0; ///< first token → finished
  double hitRate() const {
    return promptTokens ? double(reusedTokens) / promptTokens : 0.0;
  }
  double decodeTokensPerSecond() const {
    return decodeSeconds > 0 && generatedTokens > 1
               ? (generatedTokens - 1) / decodeSeconds
               : 0.0;
  }
};

struct CallOutcome {
  bool succeeded = false;
  std::string error; ///< why it failed
  std::vector<kv::TokenId> tokens;
  std::string text;
  CallStats stats;
  /// The logits the first token was sampled from, with
  /// ExecutorOptions::keepFirstLogits (tests compare cache hits to misses).
  std::vector<float> firstLogits;
};

/// Streaming: a piece of text call `call` just produced.
using TokenCallback =
    std::function<void(plan::CallId call, llvm::StringRef piece)>;

/// Where a run stands, reported after every scheduler step (for a progress
/// line; cheap to produce: no per-call scan).
struct ExecutorProgress {
  size_t callsDone = 0; ///< finished or failed
  size_t callsTotal = 0;
  uint64_t tokensGenerated = 0; ///< by all calls of this run so far
};
using ProgressCallback = std::function<void(const ExecutorProgress &)>;

class Executor {
public:
  /// Sizes the KV storage and block pool for `model`. The cache outlives
  /// every run(), so later plans hit what earlier ones left.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(model::Model &model, const model::Tokenizer &tokenizer,
         const ExecutorOptions &options);
  ~Executor();

  /// Runs every call of `plan` to completion (or failure) and returns one
  /// outcome per call, indexed by CallId.
  std::vector<CallOutcome> run(const plan::Plan &plan,
                               const TokenCallback &onToken = nullptr,
                               const ProgressCallback &onProgress = nullptr);

  const ExecutorOptions &options() const { return executorOptions; }
  kv::BlockPool &pool() { return *blockPool; }
  /// The K/V memory (tests compare what relocation left there).
  const kv::KvStorage &kvStorage() const { return *storage; }
  /// The hasher every plan's block hashes come from.
  const kv::BlockHasher &hasher() const { return cacheManager->hasher(); }

private:
  Executor() = default;
  struct Active;
  struct RunState;
  struct StepBatch;

  bool admitReady(RunState &state);
  llvm::Error applyRelocations(RunState &state);
  llvm::Error step(RunState &state);
  void finish(RunState &state, Active &active, bool succeeded,
              std::string error);
  bool preemptFor(RunState &state, Active &needy);
  /// Makes the decode slot's copy-on-write copy and remembers the slot.
  void takeSlot(Active &active, const kv::DecodeSlot &slot);
  /// Blocks `active` may still need to reach its max_tokens.
  uint64_t growthBlocks(const RunState &state, const Active &active) const;

  model::Model *modelPtr = nullptr;
  const model::Tokenizer *tokenizerPtr = nullptr;
  ExecutorOptions executorOptions;
  std::unique_ptr<kv::KvStorage> storage;
  std::unique_ptr<kv::BlockPool> blockPool;
  std::unique_ptr<kv::KvCacheManager> cacheManager;
  /// Applies CIDRA plans and decode copies with the model's exact RoPE.
  std::unique_ptr<kv::RelocationExecutor> relocation;
  kv::RequestId nextRequestId = 1;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_EXECUTOR_H
