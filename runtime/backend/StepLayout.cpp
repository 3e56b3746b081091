//===- StepLayout.cpp - One forward step, checked and flattened -----------===//

#include "runtime/backend/StepLayout.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace spanc::backend {

llvm::Error buildStepLayout(llvm::ArrayRef<model::ForwardSequence> batch,
                            const StepLimits &limits, StepLayout &layout) {
  layout.sequences = batch;
  layout.tokenIds.clear();
  layout.positions.clear();
  layout.slotBlocks.clear();
  layout.slotIndices.clear();
  layout.queryIndices.clear();
  layout.queryOffsets.assign(1, 0);
  layout.pageOffsets.assign(1, 0);
  layout.contextLengths.clear();
  layout.decodeSequences.clear();
  layout.spanScalings.clear();
  layout.blockIds.clear();
  layout.validTokens.clear();
  layout.spanPages.clear();
  layout.logitTokens.clear();
  layout.rowOffsets.assign(1, 0);
  layout.numDecodeRows = 0;
  layout.anyAllLogits = layout.anySpanScaling = false;
  layout.anyQueryIndices = llvm::any_of(batch, [](const auto &sequence) {
    return !sequence.queryIndices.empty();
  });
  layout.maxContextLength = layout.maxQueryLength = 0;
  for (size_t index = 0; index < batch.size(); ++index) {
    const model::ForwardSequence &sequence = batch[index];
    const int64_t count = int64_t(sequence.tokens.size());
    int64_t length = 0;
    if (llvm::Error error =
            model::checkForwardSequence(batch, index, limits, length))
      return error;
    const bool decode = model::isDecodeSequence(sequence);
    layout.decodeSequences.push_back(decode ? 1 : 0);
    if (decode)
      layout.numDecodeRows += count;
    layout.anyAllLogits |= sequence.logits == model::LogitsRequest::All;
    const bool scaled =
        !sequence.spanPages.empty() && !sequence.spanScaling.isIdentity();
    layout.anySpanScaling |= scaled;
    layout.spanScalings.push_back(sequence.spanScaling);
    for (size_t page = 0; page < sequence.blockIds.size(); ++page)
      layout.spanPages.push_back(scaled ? sequence.spanPages[page] : 0);
    for (int64_t token = 0; token < count; ++token) {
      layout.tokenIds.push_back(sequence.tokens[size_t(token)]);
      layout.positions.push_back(
          model::ropePosition(sequence, length, token, limits.ropeInKernel));
      if (layout.anyQueryIndices)
        layout.queryIndices.push_back(
            model::queryIndex(sequence, length, token));
    }
    size_t firstSlot = layout.slotBlocks.size();
    layout.slotBlocks.resize(firstSlot + size_t(count));
    layout.slotIndices.resize(firstSlot + size_t(count));
    if (!sequence.queryIndices.empty()) {
      // The slot of each token's logical index, walking pages forwards.
      int64_t pageStart = 0;
      size_t page = 0;
      for (int64_t token = 0; token < count; ++token) {
        const int32_t index = sequence.queryIndices[size_t(token)];
        while (pageStart + sequence.validTokens[page] <= index)
          pageStart += sequence.validTokens[page++];
        layout.slotBlocks[firstSlot + size_t(token)] = sequence.blockIds[page];
        layout.slotIndices[firstSlot + size_t(token)] =
            int32_t(index - pageStart);
      }
    } else {
      // The slots of the last `count` logical tokens, walking pages
      // backwards (a partial block's padding is skipped: it takes no slot).
      int64_t remaining = count;
      for (size_t page = sequence.blockIds.size(); page-- > 0 && remaining > 0;)
        for (int32_t slot = sequence.validTokens[page];
             slot-- > 0 && remaining > 0;) {
          --remaining;
          layout.slotBlocks[firstSlot + size_t(remaining)] =
              sequence.blockIds[page];
          layout.slotIndices[firstSlot + size_t(remaining)] = slot;
        }
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
  return llvm::Error::success();
}

int64_t StepLayout::attentionPairs() const {
  int64_t pairs = 0;
  for (int sequence = 0; sequence < numSequences(); ++sequence)
    for (int32_t token = queryOffsets[size_t(sequence)];
         token < queryOffsets[size_t(sequence) + 1]; ++token)
      pairs += 1 + queryIndex(sequence, token);
  return pairs;
}

} // namespace spanc::backend
