//===- CudaStepLayout.cpp - A forward step flattened into device arrays ---===//

#include "runtime/backend/CudaStepLayout.h"

#include <algorithm>

namespace spanc::backend {

namespace {

/// Appends `values` at the next aligned offset of `packed`.
int64_t pack(std::vector<int32_t> &packed, llvm::ArrayRef<int32_t> values) {
  const int64_t alignment = CudaStepLayout::kPackAlignment;
  int64_t offset =
      (int64_t(packed.size()) + alignment - 1) / alignment * alignment;
  packed.resize(size_t(offset), 0);
  packed.insert(packed.end(), values.begin(), values.end());
  return offset;
}

} // namespace

llvm::Error buildCudaStepLayout(llvm::ArrayRef<model::ForwardSequence> batch,
                                const StepLimits &limits,
                                CudaStepLayout &layout) {
  layout.tokenIds.clear();
  layout.positions.clear();
  layout.slotBlocks.clear();
  layout.slotIndices.clear();
  layout.queryOffsets.assign(1, 0);
  layout.pageOffsets.assign(1, 0);
  layout.contextLengths.clear();
  layout.blockIds.clear();
  layout.validTokens.clear();
  layout.logitTokens.clear();
  layout.rowOffsets.assign(1, 0);
  layout.maxContextLength = layout.maxQueryLength = 0;
  model::ForwardLimits checked = limits;
  checked.spanScalingRefusal =
      "span scaling (--span-temperature, --span-mass-scale) is not "
      "implemented by the CUDA backend; use --device=cpu";
  checked.keyMassRefusal = "question-guided span repair (--span-guided) is "
                           "not implemented by the CUDA backend; use "
                           "--device=cpu";
  for (size_t index = 0; index < batch.size(); ++index) {
    const model::ForwardSequence &sequence = batch[index];
    const int64_t count = int64_t(sequence.tokens.size());
    int64_t length = 0;
    if (llvm::Error error =
            model::checkForwardSequence(batch, index, checked, length))
      return error;
    for (int64_t token = 0; token < count; ++token) {
      layout.tokenIds.push_back(sequence.tokens[size_t(token)]);
      layout.positions.push_back(
          model::ropePosition(sequence, length, token, limits.ropeInKernel));
    }
    // The slots of the last `count` logical tokens, walking pages backwards
    // (a partial block's padding is skipped: it takes no slot).
    size_t firstSlot = layout.slotBlocks.size();
    layout.slotBlocks.resize(firstSlot + size_t(count));
    layout.slotIndices.resize(firstSlot + size_t(count));
    int64_t remaining = count;
    for (size_t page = sequence.blockIds.size(); page-- > 0 && remaining > 0;)
      for (int32_t slot = sequence.validTokens[page];
           slot-- > 0 && remaining > 0;) {
        --remaining;
        layout.slotBlocks[firstSlot + size_t(remaining)] =
            sequence.blockIds[page];
        layout.slotIndices[firstSlot + size_t(remaining)] = slot;
      }
    const int32_t firstToken = layout.queryOffsets.back();
    layout.queryOffsets.push_back(firstToken + int32_t(count));
    layout.pageOffsets.push_back(layout.pageOffsets.back() +
                                 int32_t(sequence.blockIds.size()));
    layout.contextLengths.push_back(int32_t(length));
    layout.blockIds.insert(layout.blockIds.end(), sequence.blockIds.begin(),
                           sequence.blockIds.end());
    layout.validTokens.insert(layout.validTokens.end(),
                              sequence.validTokens.begin(),
                              sequence.validTokens.end());
    layout.maxContextLength = std::max(layout.maxContextLength, length);
    layout.maxQueryLength = std::max(layout.maxQueryLength, count);
    int64_t first = firstToken;
    if (sequence.logits == model::LogitsRequest::None)
      first = firstToken + count;
    else if (sequence.logits == model::LogitsRequest::Last)
      first = firstToken + count - 1;
    for (int64_t token = first; token < firstToken + count; ++token)
      layout.logitTokens.push_back(int32_t(token));
    layout.rowOffsets.push_back(int64_t(layout.logitTokens.size()));
  }

  layout.packed.clear();
  StepArrayOffsets &offsets = layout.offsets;
  offsets.tokenIds = pack(layout.packed, layout.tokenIds);
  offsets.positions = pack(layout.packed, layout.positions);
  offsets.slotBlocks = pack(layout.packed, layout.slotBlocks);
  offsets.slotIndices = pack(layout.packed, layout.slotIndices);
  offsets.queryOffsets = pack(layout.packed, layout.queryOffsets);
  offsets.pageOffsets = pack(layout.packed, layout.pageOffsets);
  offsets.blockIds = pack(layout.packed, layout.blockIds);
  offsets.validTokens = pack(layout.packed, layout.validTokens);
  offsets.contextLengths = pack(layout.packed, layout.contextLengths);
  offsets.logitTokens = pack(layout.packed, layout.logitTokens);
  return llvm::Error::success();
}

} // namespace spanc::backend
