//===- SpanLayout.h - The span-layout policy: modes, segments, hashes -----===//
//
// The one home of the span modes (docs/ARCHITECTURE.md, "Span attention"):
// their options and names (one grammar, parsed and printed here for the
// CLI, the server and the benchmarks), how a request's segments are laid
// out in blocks (positions, hashes, page lists, the recomputed head and end
// runs, the repair segment of a blend or a question-guided repair), which
// cache hits a layout may keep, and which pages are read scaled. The KV
// cache manager turns such a layout into block references; the scheduler
// and the runner act on its segments without knowing the modes.
//
// Block layout of a request: every segment starts on a block boundary; the
// unused slots of a segment's last block are padding that takes no position
// (so the next segment's first token has the position right after this
// segment's last token). A span's page list is its context's blocks (what
// precedes its plus, or nothing), then its own; a causal segment's
// (prefix, tail, recompute run) is every block visible before it in order,
// then its own. Generated tokens extend the last segment, which must be
// causal.
//
// Hashes: a causal segment chains from the context of everything before it;
// a span chains from the context before its plus (SpanContext::Prefix) or
// from the model's empty-context root (Isolated, and spans that carry their
// own conversation), so it hashes the same at any offset among its
// siblings; after a span the context becomes join(context, span's last
// hash), so a tail depends on every preceding segment, in order. A
// recomputed run of span blocks is a causal segment of its own, chained
// from what it reads; a repair segment chains from the context after all
// the spans of its plus and the hash of its settings (and, when the
// question chooses what it recomputes, of the segment that follows).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_SPANLAYOUT_H
#define SPANC_RUNTIME_KV_SPANLAYOUT_H

#include "plan/Segment.h"
#include "runtime/kv/BlockHash.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/kv/RelocationPlanner.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
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

/// The layers whose attention from the question ranks span blocks in a
/// question-guided repair (SpanOptions::guidedPercent).
enum class RepairLayers {
  All,   ///< every layer
  Last,  ///< the last layer only
  Upper, ///< the upper-middle band [numLayers/2, 3*numLayers/4)
};

/// What a question-guided repair ranks and recomputes.
enum class RepairGranularity {
  Block, ///< whole span blocks, by the attention mass of their tokens
  Token, ///< single span tokens
};

/// How spans are laid out: the accuracy modes of issues 14 and 24.
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
  /// attention"): after the spans of a plus, a repair segment copies their
  /// blocks, recomputes the first kBlendSelectionLayers layers of all their
  /// tokens in the call's context, and then recomputes through every layer
  /// the blendPercent % of tokens whose K/V moved most at the last of those
  /// layers (plus every token of the head and end blocks above); what
  /// follows reads the repair. 0: off.
  uint32_t blendPercent = 0;
  /// Span scaling (APE-style; docs/ARCHITECTURE.md, "Span attention"):
  /// what follows a plus reads its spans' pages (their cached blocks, the
  /// recomputed head and end blocks, the repair) with scores divided by
  /// `temperature` and the log of their attention mass multiplied by
  /// `massScale` before it is weighed against the prefix's and its own.
  /// 1 and 1: off. What the tail computes depends on them, so they join
  /// the hash of every block after a plus.
  float temperature = 1;
  float massScale = 1;
  /// Question-guided repair (after ProphetKV and FusionRAG;
  /// docs/ARCHITECTURE.md, "Span attention"): after the spans of a plus, a
  /// repair segment copies their blocks; the segment after the plus (the
  /// question) runs once over them and records the attention mass each
  /// span token receives over `guidedLayers`; then the guidedPercent % of
  /// span blocks (or tokens) that received most, plus the head and end
  /// blocks above, are recomputed through every layer in the call's
  /// context, and what follows reads the repair. 0: off. Exclusive with
  /// blendPercent.
  uint32_t guidedPercent = 0;
  RepairLayers guidedLayers = RepairLayers::All;
  RepairGranularity guidedGranularity = RepairGranularity::Block;
  /// Also recompute this many neighbouring blocks (tokens) on each side of
  /// every chosen one, inside its span.
  uint32_t guidedNeighbours = 0;

  bool scalesSpans() const { return temperature != 1 || massScale != 1; }
  /// Whether a plus gets a repair segment (blend or question-guided).
  bool repairs() const { return blendPercent != 0 || guidedPercent != 0; }
};

/// The layers a blend recomputes for every span token to choose the tokens
/// it recomputes in full (by the K/V distance at the last of them).
constexpr uint32_t kBlendSelectionLayers = 2;
/// The longest head or end recompute: longer heads cost more than a small
/// span saves; 64 blocks is 1 024 tokens at the default block size.
constexpr uint32_t kMaxRecomputeBlocks = 64;
/// The most neighbours a question-guided repair adds on each side.
constexpr uint32_t kMaxRepairNeighbours = 8;

llvm::Expected<CacheMode> parseCacheMode(llvm::StringRef text);
const char *cacheModeName(CacheMode mode);
llvm::Expected<SpanContext> parseSpanContext(llvm::StringRef text);
const char *spanContextName(SpanContext context);
llvm::Expected<RelocationMode> parseRelocationMode(llvm::StringRef text);
const char *relocationModeName(RelocationMode mode);
llvm::Expected<RepairLayers> parseRepairLayers(llvm::StringRef text);
const char *repairLayersName(RepairLayers layers);
llvm::Expected<RepairGranularity> parseRepairGranularity(llvm::StringRef text);
const char *repairGranularityName(RepairGranularity granularity);

/// Whether `options` is a mode spanc runs; the error names the setting
/// and its range (head and end recompute at most kMaxRecomputeBlocks,
/// percentages 0..100, span scaling in [0.1, 4], blend and question-guided
/// repair not together, at most kMaxRepairNeighbours neighbours).
llvm::Error checkSpanOptions(const SpanOptions &options);

/// A span mode by name, the one grammar of the CLI's --span-mode, the
/// server and the benchmarks: `isolated` or `prefix`, then `+`-separated
/// parts: `recomputeN` and `endN` (head and end blocks, 1..64), `blendP`
/// (1..100 %), `guidedR` (1..100 %) with `last` or `upper` (the layers;
/// all by default), `tokens` (token granularity) and `nearN` (neighbours),
/// `tempP` and `massP` (span scaling in percent, 10..400). A name spells
/// every recompute: "prefix" alone recomputes nothing.
llvm::Expected<SpanOptions> parseSpanMode(llvm::StringRef text);
/// The name parseSpanMode reads back as `options`.
std::string spanModeName(const SpanOptions &options);

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
  /// A block of a repair segment: the span block it mirrors (an index into
  /// RequestPlan::blocks), and whether all its tokens are recomputed (a
  /// head or end block of SpanOptions::recomputeBlocks/EndBlocks).
  uint32_t blendSource = UINT32_MAX;
  bool blendForced = false;
  /// A repair block whose span did not see everything before it in the
  /// call: a question-guided repair may choose it.
  bool repairCandidate = false;
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
  /// A repair segment (SpanOptions::blendPercent, guidedPercent): a
  /// boundary segment over every span of a plus, whose blocks mirror theirs
  /// (LogicalBlock::blendSource). It is computed whole in one step, not
  /// causally: see sched::BlendTask. Hit or computed as a whole.
  bool blend = false;
  /// A repair whose tokens the segment after it chooses (guidedPercent):
  /// that segment's first probeTokens tokens (those it was not given by a
  /// preemption, plan::Segment::generatedTokens) are its probe.
  bool guided = false;
  uint32_t probeTokens = 0;
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
  /// The previous run's page list is a prefix of this run's, before this
  /// run's own blocks (a recomputed block after each span, then the tail):
  /// scheduled in one step, the two run as one attention sequence with
  /// explicit query indices (model::ForwardSequence::queryIndices), each
  /// row computing what it would alone. Set at admission; never across a
  /// repair, a relocation barrier or span scaling (whose page flags depend
  /// on the reader).
  bool extendsPrevious = false;
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

/// Drops the cache hits (LogicalBlock::reused) of `plan` that its layout
/// cannot keep: with ReRoPE a span that reads its prefix is computed at
/// its compute positions, so one not found whole is computed whole; a
/// repair's choice spans all its blocks, so it is reused whole or computed
/// whole; and a question-guided repair runs its probe in the blocks of the
/// segments after it, so when it is computed they are too.
void settleSpanHits(RequestPlan &plan, RelocationMode relocationMode);

/// The prompt tokens whose K/V the last segment of `plan` reads from the
/// cache (a span block it reads recomputed does not count; a repair block
/// counts as its span block: a repair recomputes a fraction of them).
/// With `spansOnly`, only those of span blocks: what prefix caching could
/// not have reused.
uint32_t countReusedTokens(const RequestPlan &plan, bool spansOnly = false);

/// Whether segment `reader` of `plan` reads its page `page` (an index into
/// plan.blocks) with span scaling (SpanOptions::temperature, massScale): a
/// causal segment after a plus reads so the pages of its spans, recomputed
/// head and end blocks and repair; a span and a recompute read their
/// context as a causal run would.
bool readsScaled(const RequestPlan &plan, const SegmentPlan &reader,
                 uint32_t page, const SpanOptions &spanOptions);

/// What a repair segment over `spanTokens` span tokens costs a step's
/// token budget, in tokens computed through every layer: a blend's
/// selection layers over every token (counted as a tenth of them) and its
/// chosen share; a question-guided repair's probe (`probeTokens`) and its
/// chosen share. At least one, so that a repair always takes budget.
int64_t repairStepTokens(const SpanOptions &options, int64_t spanTokens,
                         int64_t probeTokens);

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_SPANLAYOUT_H
