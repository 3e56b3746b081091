//===- StepLayout.h - One forward step, checked and flattened -------------===//
//
// The one description of a forward step that every backend runs
// (docs/ARCHITECTURE.md, "Running a plan"). A step arrives as
// model::ForwardSequence values: each sequence's new tokens, their
// positions and its page list. buildStepLayout checks them
// (model::checkForwardSequence, before anything touches the cache) and lays
// them out flat: per new token its id, RoPE position and the slot its K/V
// goes to (a partial block's padding takes none: the backwards slot walk);
// per sequence its token and page ranges, context length and row kind; per
// page its block, valid slots and span flag; and the token rows whose
// logits are wanted. Backend::forward builds it once; the CPU pass reads
// these arrays as they are, the CUDA backend packs them into one upload.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_STEPLAYOUT_H
#define SPANC_RUNTIME_BACKEND_STEPLAYOUT_H

#include "runtime/model/Forward.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

/// What a step is checked against; each backend fills in its own refusals.
using StepLimits = model::ForwardLimits;

struct StepLayout {
  /// The sequences this step describes (a key-mass probe writes into
  /// theirs). Valid while the caller's batch is.
  llvm::ArrayRef<model::ForwardSequence> sequences;

  // Per new token, in batch order.
  std::vector<int32_t> tokenIds;
  /// RoPE positions: the logical index under rope-in-kernel, else the
  /// sequence's own.
  std::vector<int32_t> positions;
  /// Where the token's K/V goes: block id and slot.
  std::vector<int32_t> slotBlocks, slotIndices;
  /// Its logical index in its sequence's page list (filled only when a
  /// sequence gives them: anyQueryIndices).
  std::vector<int32_t> queryIndices;

  // Per sequence: [s], [s + 1) ranges.
  std::vector<int32_t> queryOffsets; ///< numSequences + 1 token offsets
  std::vector<int32_t> pageOffsets;  ///< numSequences + 1 page offsets
  /// Logical tokens of the sequence's page list (its last queryLength
  /// tokens are the new ones).
  std::vector<int32_t> contextLengths;
  /// 1 where the sequence's rows are decode rows (model::isDecodeSequence).
  std::vector<uint8_t> decodeSequences;
  /// The sequence's span scaling (identity unless it has span pages).
  std::vector<model::SpanScaling> spanScalings;

  // Per page, sequences back to back.
  std::vector<int32_t> blockIds, validTokens;
  /// Nonzero for a span page whose sequence scales spans.
  std::vector<uint8_t> spanPages;

  /// Token rows whose logits are wanted, in output order.
  std::vector<int32_t> logitTokens;
  /// model::ForwardOutput::rowOffsets for this step.
  llvm::SmallVector<int64_t, 8> rowOffsets;

  int64_t numDecodeRows = 0;   ///< new tokens of decode sequences
  bool anyAllLogits = false;   ///< a sequence wants every row's logits
  bool anySpanScaling = false; ///< a sequence scales its span pages
  /// A sequence gives its tokens' logical indices (queryIndices).
  bool anyQueryIndices = false;
  /// The longest page list and the most new tokens of one sequence.
  int64_t maxContextLength = 0, maxQueryLength = 0;

  int64_t numTokens() const { return int64_t(tokenIds.size()); }
  int numSequences() const { return int(contextLengths.size()); }
  int64_t numPages() const { return int64_t(blockIds.size()); }
  int64_t numLogitRows() const { return int64_t(logitTokens.size()); }
  /// New token `token` (of sequence `sequence`)'s logical index in its
  /// page list: the last key it sees.
  int64_t queryIndex(int sequence, int64_t token) const {
    if (anyQueryIndices)
      return queryIndices[size_t(token)];
    return int64_t(contextLengths[size_t(sequence)]) -
           queryOffsets[size_t(sequence) + 1] + token;
  }
  /// The query-key pairs of one layer's attention: each new token sees the
  /// keys of its page list up to its logical index (ForwardProfile's count
  /// of the work behind attention's time).
  int64_t attentionPairs() const;
};

/// Checks `batch` against `limits` and fills `layout` (its vectors keep
/// their capacity from step to step). Fails, naming the sequence, before
/// anything is written.
llvm::Error buildStepLayout(llvm::ArrayRef<model::ForwardSequence> batch,
                            const StepLimits &limits, StepLayout &layout);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_STEPLAYOUT_H
