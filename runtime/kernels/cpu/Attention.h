//===- Attention.h - Paged causal attention on the CPU --------------------===//
//
// One kernel serves prefill and decode, plain sequences and span queries:
// every sequence of a batch is a *page list* (block ids + the number of
// valid tokens in each block) over the physical KV blocks, i.e. a virtual
// sequence whose logical tokens are the valid slots in page order. Padding
// slots are skipped and take no logical index. A sequence's queries are its
// last n logical tokens; query i sees logical keys 0 .. (len - n + i).
//
// Heads are grouped (GQA): the query heads h*g .. h*g+g-1 share KV head h and
// are processed together so each K/V block is read once per group. Work is
// split over (sequence, KV head, tile of query rows) and over ranges of
// pages whose partial softmax states are merged after (a prompt tile's in
// fixed chunks of its page list, so a row's result never depends on its
// tile; a decode tile's by its length). The prompt tiles of one sequence,
// KV head and chunk run together in page passes that pack (AMX) or rotate
// and widen (AVX-512) each page once for all of them (a span hit's few
// rows over a long context).
// Scores use an online softmax, so no row of the score matrix is ever held.
// With f16 K/V on a CPU with AMX, Q.K and P.V of sequences of several
// queries run on AMX tiles (Q.K from bf16 high and low parts, P.V from
// bf16 weights, f32 sums), whatever the size of each tile.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ATTENTION_H
#define SPANC_RUNTIME_KERNELS_CPU_ATTENTION_H

#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/Rope.h"

#include <cstdint>
#include <vector>

namespace spanc::cpu {

/// One layer of physical KV memory as the kernel reads it; elements are
/// f32 or IEEE half (`precision`), converted to f32 as they are read.
///   K of (block b, head h): keys + b*blockStride + h*headStride elements,
///     stored dimension-major: element (slot s, dim d) at [d * blockSize +
///     s], so the 16 slots of one dimension are one AVX-512 vector.
///   V of (block b, head h): values + b*blockStride + h*headStride, stored
///     slot-major: element (slot s, dim d) at [s * headDim + d].
struct PagedKvView {
  const void *keys = nullptr;
  const void *values = nullptr;
  KvPrecision precision = KvPrecision::F32;
  int64_t blockStride = 0; ///< elements between consecutive blocks
  int64_t headStride = 0;  ///< elements between KV heads inside one block
  int blockSize = 16;
};

/// APE-style scaling of a sequence's attention to pages of parallel-encoded
/// context (docs/ARCHITECTURE.md, "Span attention"): their scores are
/// divided by `temperature`, and the log of their softmax mass (its
/// log-sum-exp) is multiplied by `massScale` before it is weighed against
/// the mass of the sequence's other pages.
struct SpanScaling {
  float temperature = 1;
  float massScale = 1;
  bool isIdentity() const { return temperature == 1 && massScale == 1; }
};

struct PagedAttentionShape {
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headDim = 0;
  float scale = 0;             ///< usually 1/sqrt(headDim)
  int64_t queryRowStride = 0;  ///< floats between query rows (tokens)
  int64_t outputRowStride = 0; ///< floats between output rows
};

/// The sequences of one call. Sequence s owns query/output rows
/// [queryOffsets[s], queryOffsets[s+1]) and pages
/// [pageOffsets[s], pageOffsets[s+1]) of blockIds/validTokens. Its number of
/// queries must not exceed its number of valid tokens.
struct PagedAttentionBatch {
  int numSequences = 0;
  const int32_t *queryOffsets = nullptr;
  const int32_t *pageOffsets = nullptr;
  const int32_t *blockIds = nullptr;
  const int32_t *validTokens = nullptr;
  /// Optional, per sequence: nonzero for a decode step (its one query keeps
  /// f32 products), zero for prompt rows, which take the AMX path where it
  /// is allowed however few they are, so that a prompt row rounds the same
  /// in a one-token tail as inside a long prefill. Null: a sequence of one
  /// query is a decode step.
  const uint8_t *decodeSequences = nullptr;
  /// Optional SpanScaling: per page (like blockIds), nonzero for a page of
  /// parallel-encoded context; per sequence, its scaling. Both null: none.
  /// A scaled sequence's pages of each kind are folded separately and
  /// merged by the scaled masses, so its rows cost a merge more.
  const uint8_t *spanPages = nullptr;
  const SpanScaling *spanScaling = nullptr;
  /// Optional, per query row (like queryOffsets): its logical index in its
  /// sequence's page list, increasing within a sequence; a row attends to
  /// the keys up to it. Null: a sequence's queries are its last logical
  /// tokens. Several runs of a request whose page lists are prefixes of one
  /// list (the recomputed blocks after each span, then the tail) run as one
  /// sequence this way, each row folding exactly what it would alone.
  const int32_t *queryIndices = nullptr;
};

struct PagedAttentionOptions {
  /// When set, K is stored unrotated and the kernel rotates each key at its
  /// logical index with this table (rope-in-kernel); it must cover the
  /// longest page list. When null, K is stored already rotated.
  const RopeTable *keyRope = nullptr;
  /// Use the portable scalar path even where AVX-512 is available (tests).
  bool forceScalar = false;
  /// Let sequences of several queries over f16 K/V take the AMX path where
  /// the CPU has it (bf16 high/low products, f32 sums; see AttentionAmx.cpp);
  /// false keeps every product in f32.
  bool allowAmx = true;
  /// Let prefill tiles reuse blocks rotated or packed per thread (the
  /// block cache); false folds as a call too large for it does (tests).
  bool useBlockCache = true;
  /// Minimum pages per key split of a decode tile; 0 picks the default (8
  /// pages).
  int minPagesPerSplit = 0;
  /// Pages per key split of a prompt tile, counted from its sequence's
  /// first page; 0 picks kDefaultPromptSplitPages.
  int promptSplitPages = 0;
};

/// A prompt tile's key splits: 128 pages (2048 tokens in 16-token blocks).
/// The tiles folding one split run back to back (AttentionWorkspace::order)
/// while its packed K/V (1 MiB per KV head at head dim 64) stays in a 2 MiB
/// L2; larger splits overflow it, smaller ones cost more item set-ups and
/// merges (bench/kv:attention_bench, 2 threads, 512 rows after 7 680 keys:
/// 19.5 ms at 32 pages, 15.4 at 128, 20.7 at 256 on the AMX host).
constexpr int kDefaultPromptSplitPages = 128;

/// Scratch memory the kernel reuses from call to call; it grows to the
/// largest batch seen and is never shrunk, so steady-state calls allocate
/// nothing.
struct AttentionWorkItem {
  int32_t sequence, kvHead, firstRow, numRows, pageBegin, pageEnd;
  int32_t partial;   ///< index of this split's partial state, or -1
  int32_t numSplits; ///< on a group's first split: splits in the group
  /// Its pages are parallel-encoded context of a scaled sequence
  /// (SpanScaling): scores divided by the temperature, mass scaled.
  bool spanPages = false;
};
struct AttentionWorkspace {
  std::vector<int64_t> pageStarts; ///< logical index of each page's slot 0
  std::vector<AttentionWorkItem> items;
  std::vector<int32_t> groups; ///< first item of each split group
  /// The order items run in: by sequence, KV head and key range, then tile,
  /// so that the tiles folding one range of pages run back to back while
  /// its packed K/V is in the core's cache (tile-major, every tile would
  /// stream the whole context from memory). Results do not depend on it.
  std::vector<int32_t> order;
  /// Page passes: where each run of `order` one thread folds together
  /// starts (the prompt tiles of one sequence, KV head and key range share
  /// a pass and pack or rotate each page once), then the end.
  std::vector<int32_t> passes;
  /// Per pass: whether it reads through the thread's block cache when the
  /// call has one (every AMX pass; a rope-in-kernel AVX-512 pass whose key
  /// range is cut into several).
  std::vector<uint8_t> passUsesBlockCache;
  std::vector<float> partials; ///< split states: max, sum, accumulator
  /// Planning scratch: one sequence's tile cuts and the costs behind them.
  std::vector<int32_t> tileCuts, tileFrom;
  std::vector<double> tileCost;
  std::vector<int64_t> tilePagesSeen;
  /// Per thread and page of the call: that block's K and V for one KV head
  /// as prefill tiles read them (f32, K rotated with rope-in-kernel; or on
  /// the AMX path bf16 high/low pairs), so a block is widened, rotated or
  /// packed once per thread and KV head instead of once per tile; tags
  /// hold kvHead + 1 of each entry (0: empty).
  std::vector<float> blockCache;
  std::vector<int32_t> blockCacheTags;
};

/// A call's plan as plain values (its work items, order and passes are in
/// the workspace that made it), for calls that share one: the layers of a
/// decode step see the same shape, batch and options, so the step plans
/// once (planPagedAttention) and each layer's call runs the plan
/// (pagedAttentionPlannedInTeam) instead of planning on one thread and
/// handing the plan to the others at every layer.
struct PagedAttentionPlan {
  bool useAvx512 = false, useAmx = false;
  bool useAvx2 = false; ///< AttentionAvx2.cpp, where AVX-512 is not used
  int32_t numPartials = 0;
  int32_t totalPages = 0;
  int64_t stateFloats = 0;
  int64_t numPasses = 0;
  int64_t cacheFloats = 0; ///< per thread
  /// Per-thread packed blocks of one call's K/V (null: none; always for
  /// planPagedAttention's plans, which serve several calls).
  float *blockCache = nullptr;
  int32_t *blockCacheTags = nullptr;
};

/// output[row][head*headDim + d] = softmax(q k^T * scale) v, causal over
/// logical indices, for every sequence of `batch` (with SpanScaling where
/// the batch asks for it).
void pagedAttention(const PagedAttentionShape &shape,
                    const PagedAttentionBatch &batch, const PagedKvView &kv,
                    const float *queries, float *output,
                    const PagedAttentionOptions &options,
                    AttentionWorkspace &workspace);

/// pagedAttention for the threads of an enclosing parallel region (a
/// decode step's layers in one region): every thread of the team calls it
/// with the same arguments; it returns on each after the last barrier,
/// with every output row written. The same results as pagedAttention.
void pagedAttentionInTeam(const PagedAttentionShape &shape,
                          const PagedAttentionBatch &batch,
                          const PagedKvView &kv, const float *queries,
                          float *output, const PagedAttentionOptions &options,
                          AttentionWorkspace &workspace);

/// Plans a call for `numThreads` threads into `workspace`, without the
/// block cache: the items, order and passes every call of
/// pagedAttentionPlannedInTeam with the same shape, batch (its values too),
/// K/V layout and options then runs.
PagedAttentionPlan planPagedAttention(const PagedAttentionShape &shape,
                                      const PagedAttentionBatch &batch,
                                      const PagedKvView &kv,
                                      const PagedAttentionOptions &options,
                                      AttentionWorkspace &workspace,
                                      int numThreads);

/// pagedAttentionInTeam on a plan made by planPagedAttention into the same
/// workspace: every thread of the team calls it with the same arguments;
/// the same results.
void pagedAttentionPlannedInTeam(const PagedAttentionPlan &plan,
                                 const PagedAttentionShape &shape,
                                 const PagedAttentionBatch &batch,
                                 const PagedKvView &kv, const float *queries,
                                 float *output,
                                 const PagedAttentionOptions &options,
                                 AttentionWorkspace &workspace);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ATTENTION_H
