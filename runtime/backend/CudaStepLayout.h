//===- CudaStepLayout.h - A forward step flattened into device arrays -----===//
//
// The host half of a CUDA forward step: the batch's sequences checked (by
// model::checkForwardSequence, as Model::forward checks them, before
// anything touches the cache) and laid out as the flat int32 arrays the kernels
// read — token ids and RoPE positions, the slot each new token's K/V goes to (a
// partial block's padding takes none), every sequence's page list, and the rows
// whose logits are wanted — packed into one buffer so a step costs one
// host-to-device copy. The attention kernel's own work list (tiles, page
// starts, splits) is cuda::buildAttentionPlan's, from the page lists here.
// Plain C++, so it is tested on machines without a GPU (test/unit/backend).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H
#define SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H

#include "runtime/model/Forward.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

/// What a step is checked against (its spanScalingRefusal is the CUDA
/// backend's own).
using StepLimits = model::ForwardLimits;

/// Element offsets of each array inside CudaStepLayout::packed, each
/// aligned to kPackAlignment elements (128 bytes).
struct StepArrayOffsets {
  int64_t tokenIds = 0, positions = 0, slotBlocks = 0, slotIndices = 0,
          queryOffsets = 0, pageOffsets = 0, blockIds = 0, validTokens = 0,
          contextLengths = 0, logitTokens = 0;
};

struct CudaStepLayout {
  static constexpr int64_t kPackAlignment = 32;

  // Per new token, in batch order.
  std::vector<int32_t> tokenIds;
  /// RoPE positions: the logical index under rope-in-kernel, else the
  /// sequence's own.
  std::vector<int32_t> positions;
  /// Where the token's K/V goes: block id and slot.
  std::vector<int32_t> slotBlocks, slotIndices;

  // Per sequence: [s], [s + 1) ranges.
  std::vector<int32_t> queryOffsets; ///< numSequences + 1 token offsets
  std::vector<int32_t> pageOffsets;  ///< numSequences + 1 page offsets
  /// Logical tokens of the sequence's page list (its last queryLength
  /// tokens are the new ones).
  std::vector<int32_t> contextLengths;

  // Per page, sequences back to back.
  std::vector<int32_t> blockIds, validTokens;

  /// Token rows whose logits are wanted, in output order.
  std::vector<int32_t> logitTokens;
  /// ForwardOutput::rowOffsets for this step.
  llvm::SmallVector<int64_t, 8> rowOffsets;

  int64_t numTokens() const { return int64_t(tokenIds.size()); }
  int numSequences() const { return int(contextLengths.size()); }
  int64_t numPages() const { return int64_t(blockIds.size()); }
  int64_t numLogitRows() const { return int64_t(logitTokens.size()); }
  /// The longest page list and the most new tokens of one sequence.
  int64_t maxContextLength = 0, maxQueryLength = 0;

  /// Every array above back to back (each at an aligned offset), for one
  /// upload; `offsets` says where each starts.
  std::vector<int32_t> packed;
  StepArrayOffsets offsets;
};

/// Checks `batch` against `limits` (model::checkForwardSequence, as
/// Model::forward does) and fills `layout` (its vectors keep their capacity
/// from step to step). Refuses span scaling (temperature or mass scale
/// other than 1): the CUDA attention kernel does not scale spans.
llvm::Error buildCudaStepLayout(llvm::ArrayRef<model::ForwardSequence> batch,
                                const StepLimits &limits,
                                CudaStepLayout &layout);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H
