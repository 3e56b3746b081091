//===- KvCacheManager.h - Per-request block tables over the block pool ----===//
//
// Turns a request's segment list (docs/ARCHITECTURE.md, "The plan": prefix
// / span / tail, carried out of band) into what the forward pass needs: the
// logical blocks with their tokens and positions, which of them are reused
// from the cache and which must be computed, the page list each segment's
// attention reads, and the relocations reused span blocks need. It holds
// the request's block references from admission to release, caches blocks
// once their K/V exist, and once per scheduler step hands the step's
// relocations to CIDRA.
//
// Block layout of a request: every segment starts on a block boundary; the
// unused slots of a segment's last block are padding that takes no position
// (so the next segment's first token has the position right after this
// segment's last token). A span's page list is its context's blocks (what
// precedes its plus, or nothing: "Span attention"), then its own; a causal
// segment's (prefix, tail, recompute run) is every block visible before it
// in order, then its own. Generated tokens extend the last segment, which
// must be causal.
//
// Hashes: a causal segment chains from the context of everything before it;
// a span chains from the context before its plus (SpanContext::Prefix) or
// from the model's empty-context root (Isolated, and spans that carry their
// own conversation), so it hashes the same at any offset among its
// siblings; after a span the context becomes join(context, span's last
// hash), so a tail depends on every preceding segment, in order. A
// recomputed run of span blocks (SpanOptions::recomputeBlocks,
// recomputeEndBlocks) is a causal segment of its own, chained from what it
// reads.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_KVCACHEMANAGER_H
#define SPANC_RUNTIME_KV_KVCACHEMANAGER_H

#include "plan/Segment.h"
#include "runtime/kv/BlockHash.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/RelocationPlanner.h"

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

using plan::Segment;
using plan::SegmentKind;
using plan::segmentKindName;

/// `--cache=span|prefix|off`.
enum class CacheMode {
  Span,   ///< spans hash from the root and hit at any offset (this design)
  Prefix, ///< stock prefix caching: spans ignored, one causal chain
  Off,    ///< no reuse and nothing cached
};

/// `--relocation=rerope|rope-in-kernel`.
enum class RelocationMode {
  Rerope,       ///< K stored rotated; reused blocks turned by CIDRA plans
  RopeInKernel, ///< K stored unrotated; attention rotates at logical index
};

/// `--span-context=prefix|isolated`: what a span attends to besides itself
/// (docs/ARCHITECTURE.md, "Span attention").
enum class SpanContext {
  /// The context before its plus in the call (BOS, the system turn, earlier
  /// messages): its blocks hash from that context and hit whenever a call
  /// repeats it, with the spans in any order.
  Prefix,
  /// Nothing: spans hash from the model's root and hit after any prefix, at
  /// the price of accuracy.
  Isolated,
};

/// How spans are laid out: the accuracy modes of issue 14.
struct SpanOptions {
  SpanContext context = SpanContext::Prefix;
  /// Boundary recompute: the first this-many blocks of each span that did
  /// not already see everything before it in the call are computed again
  /// in that call's context, and what follows reads those rows instead of
  /// the span's own; the span's cached blocks stay as they are. 0: off.
  uint32_t recomputeBlocks = 0;
  /// The same for the last this-many blocks of each such span. One by
  /// default: the best measured trade-off of accuracy against hit cost
  /// (bench/results/accuracy.md, docs/ARCHITECTURE.md "Span attention").
  uint32_t recomputeEndBlocks = 1;
  /// Selective recompute (CacheBlend-style; docs/ARCHITECTURE.md, "Span
  /// attention"): after the spans of a plus, a blend segment copies their
  /// blocks, recomputes the first kBlendSelectionLayers layers of all their
  /// tokens in the call's context, and then recomputes through every layer
  /// the blendPercent % of tokens whose K/V moved most at the last of those
  /// layers (plus every token of the head and end blocks above); what
  /// follows reads the blend. 0: off.
  uint32_t blendPercent = 0;
  /// Span scaling (APE-style; docs/ARCHITECTURE.md, "Span attention"):
  /// what follows a plus reads its spans' pages (their cached blocks, the
  /// recomputed head and end blocks, the blend) with scores divided by
  /// `temperature` and the log of their attention mass multiplied by
  /// `massScale` before it is weighed against the prefix's and its own.
  /// 1 and 1: off. What the tail computes depends on them, so they join
  /// the hash of every block after a plus.
  float temperature = 1;
  float massScale = 1;
  bool scalesSpans() const { return temperature != 1 || massScale != 1; }
};

/// The layers a blend recomputes for every span token to choose the tokens
/// it recomputes in full (by the K/V distance at the last of them).
constexpr uint32_t kBlendSelectionLayers = 2;

llvm::Expected<CacheMode> parseCacheMode(llvm::StringRef text);
llvm::Expected<SpanContext> parseSpanContext(llvm::StringRef text);
const char *spanContextName(SpanContext context);
llvm::Expected<RelocationMode> parseRelocationMode(llvm::StringRef text);

/// A block-sized piece of one segment.
struct LogicalBlock {
  BlockId block = InvalidBlock; ///< physical block (after admission)
  uint32_t segment = 0;         ///< index into RequestPlan::segments
  uint32_t firstToken = 0;      ///< index into RequestPlan::tokens
  uint32_t numTokens = 0;       ///< valid tokens (the rest is padding)
  int64_t position = 0;         ///< logical position of the first token
  /// Where its K is computed (ReRoPE): `position`, except for a span that
  /// attends to its prefix, which is computed right after that prefix (so
  /// its K/V do not depend on its siblings) and then moved to `position`.
  int64_t computePosition = 0;
  BlockHash hash;      ///< of its tokens (prompt part at admission)
  bool reused = false; ///< a cache hit: nothing to compute
  /// A block of a blend segment: the span block it blends (an index into
  /// RequestPlan::blocks), and whether all its tokens are recomputed (a
  /// head or end block of SpanOptions::recomputeBlocks/EndBlocks).
  uint32_t blendSource = UINT32_MAX;
  bool blendForced = false;
};

struct SegmentPlan {
  SegmentKind kind = SegmentKind::Prefix;
  uint32_t firstToken = 0; ///< index into RequestPlan::tokens
  uint32_t numTokens = 0;
  int64_t firstPosition = 0;
  uint32_t firstBlock = 0; ///< index into RequestPlan::blocks
  uint32_t numBlocks = 0;
  /// The parent of its first block's hash: the hash of its context.
  BlockHash parentHash;
  /// Its context: segments [0, contextSegments) of the request, holding
  /// contextTokens tokens. A causal segment's is everything before it; a
  /// span's, everything before its plus (SpanContext::Prefix) or nothing.
  uint32_t contextSegments = 0;
  uint32_t contextTokens = 0;
  /// A causal segment that recomputes blocks of the span before it in the
  /// request's context (SpanOptions::recomputeBlocks, recomputeEndBlocks):
  /// its tokens are some of that span's, and later segments read its blocks
  /// instead of the span's own.
  bool boundary = false;
  /// A blend segment (SpanOptions::blendPercent): a boundary segment over
  /// every span of a plus, whose blocks mirror theirs (LogicalBlock::
  /// blendSource). It is computed whole in one step, not causally: see
  /// sched::BlendTask. Hit or computed as a whole.
  bool blend = false;
  /// The blocks its attention reads, in logical order, as indices into
  /// RequestPlan::blocks: its context's, then its own (the last numBlocks).
  llvm::SmallVector<uint32_t, 16> pages;
};

/// Consecutive blocks of one segment to compute in one attention call: the
/// queries are their tokens, which are the last tokens of the page list
/// `segment.pages[0, numPages)`. With rerope, rotate Q and K at
/// `firstPosition + i`; with rope-in-kernel, rotate Q at
/// `firstLogicalIndex + i` (its index in that page list) and store K
/// unrotated.
struct ComputeRun {
  uint32_t segment = 0;
  uint32_t firstBlock = 0; ///< index into RequestPlan::blocks
  uint32_t numBlocks = 0;
  uint32_t numPages = 0;
  uint32_t firstToken = 0; ///< index into RequestPlan::tokens
  uint32_t numTokens = 0;
  int64_t firstPosition = 0;
  int64_t firstLogicalIndex = 0;
  /// With ReRoPE: spans computed before this run sit at their compute
  /// positions; relocate them (KvCacheManager::relocateComputedSpans and
  /// the next planStep) before this run reads them.
  bool afterSpanRelocation = false;
};

struct RequestPlan {
  RequestId id = 0;
  std::vector<TokenId> tokens; ///< the segments' tokens, then generated ones
  llvm::SmallVector<SegmentPlan, 4> segments;
  llvm::SmallVector<LogicalBlock, 32> blocks;
  llvm::SmallVector<ComputeRun, 4> runs;
  uint32_t numPromptTokens = 0;
  /// Prompt tokens the last segment reads from the cache.
  uint32_t numReusedTokens = 0;
  /// The position of the next token to generate.
  int64_t nextPosition = 0;
};

/// Lays a request out without a pool (block ids stay InvalidBlock, nothing
/// is reused): segments, blocks, positions, hashes, page lists. What admit
/// does first; also what `spanc compile --emit=plan` can print. Fails,
/// naming the segment, on an empty segment, a prefix after the first
/// segment, or a span at the end.
llvm::Expected<RequestPlan> layoutRequest(llvm::ArrayRef<Segment> segments,
                                          CacheMode cacheMode,
                                          const SpanOptions &spanOptions,
                                          unsigned blockSize,
                                          const BlockHasher &hasher);

/// Whether segment `reader` of `plan` reads its page `page` (an index into
/// plan.blocks) with span scaling (SpanOptions::temperature, massScale): a
/// causal segment after a plus reads so the pages of its spans, recomputed
/// head and end blocks and blend; a span and a recompute read their context
/// as a causal run would.
bool readsScaled(const RequestPlan &plan, const SegmentPlan &reader,
                 uint32_t page, const SpanOptions &spanOptions);

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

  /// Caches every block the request completed (generated tokens included,
  /// the final partial block too) and drops its references, last block
  /// first so eviction takes tails before shared heads.
  void release(RequestId id);

private:
  struct RequestState;
  RequestState &state(RequestId id);
  const RequestState &state(RequestId id) const;
  void cacheBlocks(RequestState &request, uint32_t begin, uint32_t end);
  void dropReferences(RequestState &request);
  void forgetInFlight(RequestState &request);

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
};

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_KVCACHEMANAGER_H
