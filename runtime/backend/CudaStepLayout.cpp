//===- CudaStepLayout.cpp - A forward step packed into one device upload --===//

#include "runtime/backend/CudaStepLayout.h"

namespace spanc::backend {

namespace {

/// Appends `values` at the next aligned offset of `packed`.
int64_t pack(std::vector<int32_t> &packed, llvm::ArrayRef<int32_t> values) {
  const int64_t alignment = CudaStepArrays::kPackAlignment;
  int64_t offset =
      (int64_t(packed.size()) + alignment - 1) / alignment * alignment;
  packed.resize(size_t(offset), 0);
  packed.insert(packed.end(), values.begin(), values.end());
  return offset;
}

} // namespace

StepLimits withCudaRefusals(StepLimits limits) {
  limits.spanScalingRefusal =
      "span scaling (--span-temperature, --span-mass-scale) is not "
      "implemented by the CUDA backend; use --device=cpu";
  limits.keyMassRefusal = "question-guided span repair (--span-guided) is "
                          "not implemented by the CUDA backend; use "
                          "--device=cpu";
  limits.queryIndicesRefusal = "explicit query indices (compute runs merged "
                               "into one sequence) are not implemented by "
                               "the CUDA backend";
  return limits;
}

void packCudaStep(const StepLayout &step, CudaStepArrays &arrays) {
  arrays.packed.clear();
  StepArrayOffsets &offsets = arrays.offsets;
  offsets.tokenIds = pack(arrays.packed, step.tokenIds);
  offsets.positions = pack(arrays.packed, step.positions);
  offsets.slotBlocks = pack(arrays.packed, step.slotBlocks);
  offsets.slotIndices = pack(arrays.packed, step.slotIndices);
  offsets.queryOffsets = pack(arrays.packed, step.queryOffsets);
  offsets.pageOffsets = pack(arrays.packed, step.pageOffsets);
  offsets.blockIds = pack(arrays.packed, step.blockIds);
  offsets.validTokens = pack(arrays.packed, step.validTokens);
  offsets.contextLengths = pack(arrays.packed, step.contextLengths);
  offsets.logitTokens = pack(arrays.packed, step.logitTokens);
}

} // namespace spanc::backend
