//===- AttentionPlan.h - How a paged attention call is cut into blocks ----===//
//
// Host-only (plain C++, tested without a GPU): the work list one
// pagedAttention launch runs, one thread block per item. As on the CPU
// (runtime/kernels/cpu/Attention.cpp) a tile is up to
// attentionTileRows(headDim) query rows (token x head-in-group, so the
// query heads sharing a KV head read each K/V block once) of one sequence
// and KV head. Tiles are larger than the CPU's 16 rows: each K/V block a
// thread block stages in shared memory then serves 16 prompt tokens of a
// 4-head group.
//
// A row's result must not depend on which rows share its tile or step (a
// cache hit computes only a prompt's tail; its rows must give the bits the
// full prompt gave). So a sequence's pages are cut into *ranges* of a
// fixed number of pages that depends on the page list's length alone, a
// row's softmax state is folded range by range from scratch, and the range
// states are merged in order with AttentionMath.h's merge. Whether a
// tile's ranges run in one thread block (merged in the block) or one block
// each (merged by a second launch, flash-decoding style, where the step
// has too few tiles to fill the GPU) then changes the speed, never a bit.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONPLAN_H
#define SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONPLAN_H

#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/Status.h"

#include <cstdint>
#include <vector>

namespace spanc::cuda {

/// The most query rows of one tile (one thread block's rows).
constexpr int kAttentionMaxTileRows = 64;
/// Rows per tile for a head dim: 64 up to head dim 128, 16 beyond (the
/// tile's f32 queries and accumulators live in shared memory).
inline int attentionTileRows(int headDim) {
  return headDim <= 128 ? kAttentionMaxTileRows : 16;
}
/// The most ranges a page list is cut into.
constexpr int kAttentionMaxRanges = 64;
/// Split tiles only while their range states stay this few (their memory
/// is rows x (2 + headDim) floats each).
constexpr int64_t kAttentionMaxPartialStates = 4096;

struct PagedAttentionShape {
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headDim = 0;
  float scale = 0;             ///< usually 1/sqrt(headDim)
  int64_t queryRowStride = 0;  ///< floats between query rows (tokens)
  int64_t outputRowStride = 0; ///< elements between output rows
};

/// The sequences of one call, in HOST memory (cpu::PagedAttentionBatch
/// without the CPU-only options): sequence s owns query/output rows
/// [queryOffsets[s], queryOffsets[s+1]) and pages [pageOffsets[s],
/// pageOffsets[s+1]) of blockIds/validTokens; its queries are the last
/// ones of its page list's valid slots.
struct PagedAttentionBatch {
  int numSequences = 0;
  const int32_t *queryOffsets = nullptr;
  const int32_t *pageOffsets = nullptr;
  const int32_t *blockIds = nullptr;
  const int32_t *validTokens = nullptr;
};

/// One thread block of the attention launch: tile rows [firstRow, firstRow
/// + numRows) of `sequence` and `kvHead` over pages [pageBegin, pageEnd),
/// cut into ranges of `rangePages` pages from pageBegin.
struct AttentionWorkItem {
  int32_t sequence = 0;
  int32_t kvHead = 0;
  int32_t firstRow = 0; ///< first tile row (token * group + head in group)
  int32_t numRows = 0;
  int32_t pageBegin = 0; ///< global page indices [pageBegin, pageEnd)
  int32_t pageEnd = 0;
  int32_t rangePages = 0;
  /// -1: the item is a whole tile and writes the output. Else the item is
  /// one range of a split tile and writes its state (numRows x (max, sum,
  /// headDim accumulator values)) at this float offset of the partials.
  int32_t partial = -1;
};

/// One thread block of the merge launch: items [firstItem, firstItem +
/// numSplits) are the ranges of one tile, in order.
struct AttentionMergeGroup {
  int32_t firstItem = 0;
  int32_t numSplits = 0;
};

/// Whether tiles of several ranges run as one item per range.
enum class AttentionSplitting {
  Auto,   ///< when the partial states stay under kAttentionMaxPartialStates
  Never,  ///< every tile one item
  Always, ///< every tile of several ranges split (tests)
};

struct AttentionPlanOptions {
  /// Minimum pages per range; 0 picks the default (8 pages, as the CPU's
  /// splits).
  int minPagesPerRange = 0;
  AttentionSplitting splitting = AttentionSplitting::Auto;
};

struct AttentionPlan {
  /// Per page of the batch: the logical index of its slot 0 in its
  /// sequence.
  std::vector<int32_t> pageStarts;
  std::vector<AttentionWorkItem> items;
  std::vector<AttentionMergeGroup> merges;
  int32_t tileRows = 0;         ///< attentionTileRows(headDim)
  int64_t numPartialFloats = 0; ///< the split items' states
  int32_t numPages = 0;
  int32_t numQueryRows = 0;
};

/// Pages per range of a page list of `numPages` pages: at least
/// `minPages`, and few enough that there are at most kAttentionMaxRanges.
int attentionRangePages(int64_t numPages, int minPages);

/// Floats of the state of `rows` tile rows: per row max, sum and headDim
/// accumulator values.
SPANC_HOST_DEVICE int64_t attentionStateFloats(int rows, int headDim) {
  return int64_t(rows) * (2 + headDim);
}

/// Cuts `batch` into work items. Fails, naming the sequence, on a batch
/// the kernel cannot run: heads not grouped evenly, a head dim or block
/// size past the limits, a valid count outside [0, blockSize], a sequence
/// with more queries than valid tokens.
Status buildAttentionPlan(const PagedAttentionShape &shape,
                          const PagedAttentionBatch &batch, int blockSize,
                          const AttentionPlanOptions &options,
                          AttentionPlan &plan);

/// The batch's page lists and the plan as one int32 array, so a step
/// copies them to the device at once; each field is where its array starts
/// (in int32 units). Work items are 8 words, merge groups 2.
struct PackedAttentionPlan {
  std::vector<int32_t> words;
  size_t queryOffsets = 0; ///< numSequences + 1 words
  size_t pageOffsets = 0;  ///< numSequences + 1 words
  size_t blockIds = 0;     ///< numPages words
  size_t validTokens = 0;  ///< numPages words
  size_t pageStarts = 0;   ///< numPages words
  size_t items = 0;
  size_t merges = 0;
};

/// Packs `batch` (the one `plan` was built from) and `plan`.
void packAttentionPlan(const AttentionPlan &plan,
                       const PagedAttentionBatch &batch,
                       PackedAttentionPlan &packed);

/// Dynamic shared memory of one attention thread block: the tile's
/// queries, one K and one V block in f32, its scores (the accumulators
/// live in registers).
int64_t attentionSharedBytes(int headDim, int blockSize, int tileRows);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONPLAN_H
