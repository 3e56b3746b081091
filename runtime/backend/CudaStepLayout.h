//===- CudaStepLayout.h - A forward step packed into one device upload ----===//
//
// The host half of a CUDA forward step: the StepLayout's flat int32 arrays
// (token ids and RoPE positions, the slot each new token's K/V goes to,
// every sequence's page list, the rows whose logits are wanted) packed into
// one buffer so a step costs one host-to-device copy. The attention kernel's
// own work list (tiles, page starts, splits) is cuda::buildAttentionPlan's,
// from the page lists. Plain C++, so it is tested on machines without a GPU
// (test/unit/backend).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H
#define SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H

#include "runtime/backend/StepLayout.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

/// Element offsets of each array inside CudaStepArrays::packed, each
/// aligned to kPackAlignment elements (128 bytes).
struct StepArrayOffsets {
  int64_t tokenIds = 0, positions = 0, slotBlocks = 0, slotIndices = 0,
          queryOffsets = 0, pageOffsets = 0, blockIds = 0, validTokens = 0,
          contextLengths = 0, logitTokens = 0;
};

struct CudaStepArrays {
  static constexpr int64_t kPackAlignment = 32;
  /// The step's arrays back to back (each at an aligned offset), for one
  /// upload; `offsets` says where each starts.
  std::vector<int32_t> packed;
  StepArrayOffsets offsets;
};

/// `limits` with the CUDA backend's refusals: its attention kernel neither
/// scales spans nor records key mass.
StepLimits withCudaRefusals(StepLimits limits);

/// Packs `step` into `arrays` (which keep their capacity from step to step).
void packCudaStep(const StepLayout &step, CudaStepArrays &arrays);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDASTEPLAYOUT_H
