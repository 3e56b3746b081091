//===- KvCacheManager.h - Per-request block tables over the block pool ----===//
//
// The block pool's client: it admits a request whose segments the span
// layout (SpanLayout.h: positions, hashes, page lists, recomputed runs and
// repairs, the rules on which hits a layout keeps) has laid out, looks its
// blocks up, takes references to the hits and allocates the misses, emits
// the compute runs, holds the references until release, caches blocks once
// their K/V exist, reserves decode slots (copying a shared block before its
// first write), and once per scheduler step hands the step's relocations
// to CIDRA.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_KVCACHEMANAGER_H
#define SPANC_RUNTIME_KV_KVCACHEMANAGER_H

#include "plan/Segment.h"
#include "runtime/kv/BlockHash.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/KvEventSink.h"
#include "runtime/kv/RelocationPlanner.h"
#include "runtime/kv/SpanLayout.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spanc::kv {

/// Prints segments, positions, block boundaries, hashes and page lists, one
/// line per segment and block (for `spanc compile --emit=plan` and logs).
void printRequestPlan(llvm::raw_ostream &os, const RequestPlan &plan);

/// Admits `segments` to a real manager over a scratch pool and prints, per
/// segment, its positions and blocks with their hashes, as the runtime will
/// use them (`spanc compile --emit=plan`).
void printCallLayout(llvm::ArrayRef<Segment> segments,
                     const BlockHasher &hasher, CacheMode cacheMode,
                     const SpanOptions &spanOptions, unsigned blockSize,
                     llvm::raw_ostream &os);

enum class AdmitStatus {
  Admitted,
  Wait,   ///< fits the cache, not now: retry when requests finish
  Reject, ///< malformed, or larger than the whole cache
};

struct AdmitResult {
  AdmitStatus status = AdmitStatus::Reject;
  std::string reason; ///< why, when not admitted
};

/// What one scheduler step must do before its forward pass.
struct StepPlan {
  RelocationPlan relocation;
  /// Requests admitted this step whose relocation copies did not fit: they
  /// were released (nothing of them remains) and should be admitted again
  /// later.
  llvm::SmallVector<RequestId, 2> deferred;
};

/// Where a generated token's K/V go.
struct DecodeSlot {
  BlockId block = InvalidBlock;
  uint32_t slot = 0;
  int64_t position = 0;
  /// Non-null: first copy block `copy->source` to `copy->destination` (the
  /// open block was shared or cached, so it is copied before it is written).
  std::optional<RelocationOp> copy;
};

/// Where admissions spent their time (the executor's phase profile).
struct CacheProfile {
  /// layoutRequest: positions, block hashes, page lists, recomputed runs
  /// (admit, and the in-flight check before it).
  double layoutSeconds = 0;
  /// The rest of admit: hash lookups, settling the hits, allocation, the
  /// compute runs.
  double admitSeconds = 0;
  uint64_t layouts = 0, admissions = 0;
};

class KvCacheManager {
public:
  KvCacheManager(BlockPool &pool, BlockHasher hasher, CacheMode cacheMode,
                 RelocationMode relocationMode,
                 const SpanOptions &spanOptions = {});
  ~KvCacheManager();

  CacheMode cacheMode() const { return cacheMode_; }
  const SpanOptions &spanOptions() const { return spanOptions_; }
  RelocationMode relocationMode() const { return relocationMode_; }
  const BlockHasher &hasher() const { return hasher_; }

  /// Lays the request out, looks up every block, takes references to the
  /// hits and allocates the misses. All or nothing: when not admitted,
  /// nothing changed. `id` must not be in use.
  AdmitResult admit(RequestId id, llvm::ArrayRef<Segment> segments);

  /// Whether `segments` would miss a block that an admitted request is
  /// computing right now (admitted, prefill not yet committed). Admitting
  /// it now would compute that block a second time; admitted after the
  /// other's commitPrefill it hits. Cheap when nothing is in flight.
  bool needsBlocksInFlight(llvm::ArrayRef<Segment> segments) const;

  /// The blocks admitting `segments` lays out (hits included): its
  /// segments', recomputed span blocks' and blends'. 0 when malformed
  /// (admit() reports why).
  uint64_t layoutBlocks(llvm::ArrayRef<Segment> segments) const;

  /// The plan of an admitted request (valid until release).
  const RequestPlan &plan(RequestId id) const;
  bool contains(RequestId id) const;

  /// Once per scheduler step, after admitting the step's new requests and
  /// before the forward pass: the CIDRA plan for their relocations (apply
  /// its batches with relocateBlocks, then call finishStep). Rebinds the
  /// requests to duplicated blocks, so read plan() after this.
  llvm::Expected<StepPlan>
  planStep(const RelocationPlannerOptions &options = {});
  /// Returns the plan's temporaries to the pool once its batches ran.
  void finishStep(const StepPlan &step);

  /// With ReRoPE: once the runs before one marked afterSpanRelocation were
  /// computed, queues the moves of the spans of segments before
  /// `beforeSegment` (that run's) from their compute positions to their
  /// request positions; the next planStep plans them. Returns false when
  /// there is nothing to move.
  bool relocateComputedSpans(RequestId id, uint32_t beforeSegment);

  /// After the forward pass computed the request's runs: records their
  /// positions and enters the computed blocks into the cache.
  void commitPrefill(RequestId id);

  /// Reserves the slot of the next generated token (its position is
  /// plan().nextPosition before the call). Fails when the cache is full: the
  /// scheduler must then preempt a request (release it) and retry.
  llvm::Expected<DecodeSlot> appendToken(RequestId id, TokenId token);

  const CacheProfile &profile() const { return profile_; }
  void resetProfile() { profile_ = CacheProfile(); }

  /// Caches every block the request completed (generated tokens included,
  /// the final partial block too) and drops its references, last block
  /// first so eviction takes tails before shared heads.
  void release(RequestId id);

private:
  struct RequestState;
  RequestState &state(RequestId id);
  const RequestState &state(RequestId id) const;
  void cacheBlocks(RequestState &request, uint32_t begin, uint32_t end);
  /// Enters plan.blocks[index] into the index and reports it to the pool's
  /// event sink when it was not cached before.
  void cacheBlock(const RequestPlan &plan, uint32_t index);
  void dropReferences(RequestState &request);
  void forgetInFlight(RequestState &request);
  /// layoutRequest with this manager's settings, timed.
  llvm::Expected<RequestPlan> layOut(llvm::ArrayRef<Segment> segments) const;

  BlockPool &pool_;
  BlockHasher hasher_;
  CacheMode cacheMode_;
  RelocationMode relocationMode_;
  SpanOptions spanOptions_;
  llvm::DenseMap<RequestId, std::unique_ptr<RequestState>> requests_;
  /// Requests admitted since the last planStep, in admission order.
  llvm::SmallVector<RequestId, 8> pending_;
  /// Hashes of blocks being computed by admitted requests, with counts.
  llvm::DenseMap<BlockHash, uint32_t> inFlight_;
  mutable CacheProfile profile_;
};

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_KVCACHEMANAGER_H
