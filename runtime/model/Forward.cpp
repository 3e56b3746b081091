//===- Forward.cpp - The checks every backend makes on a forward step -----===//

#include "runtime/model/Forward.h"

#include "llvm/ADT/Twine.h"

#include <cmath>

namespace spanc::model {

namespace {

llvm::Error batchError(size_t sequence, const llvm::Twine &message) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      ("forward: sequence " + llvm::Twine(sequence) + ": " + message).str());
}

} // namespace

bool isDecodeSequence(const ForwardSequence &sequence) {
  return sequence.rows == RowKind::Decode ||
         (sequence.rows == RowKind::Auto && sequence.tokens.size() == 1);
}

llvm::Error checkForwardSequence(llvm::ArrayRef<ForwardSequence> batch,
                                 size_t index, const ForwardLimits &limits,
                                 int64_t &length) {
  const ForwardSequence &sequence = batch[index];
  const int64_t count = int64_t(sequence.tokens.size());
  if (count == 0)
    return batchError(index, "no new tokens");
  if (isDecodeSequence(sequence) && index > 0 &&
      !isDecodeSequence(batch[index - 1]))
    return batchError(index, "a decode sequence after a prompt sequence "
                             "(decode sequences come first)");
  if (!limits.ropeInKernel &&
      sequence.positions.size() != sequence.tokens.size())
    return batchError(index, llvm::Twine(sequence.positions.size()) +
                                 " positions for " + llvm::Twine(count) +
                                 " tokens");
  if (sequence.blockIds.size() != sequence.validTokens.size())
    return batchError(
        index, "page list has " + llvm::Twine(sequence.blockIds.size()) +
                   " blocks but " + llvm::Twine(sequence.validTokens.size()) +
                   " valid-token counts");
  if (!sequence.spanPages.empty() &&
      sequence.spanPages.size() != sequence.blockIds.size())
    return batchError(
        index, "page list has " + llvm::Twine(sequence.blockIds.size()) +
                   " blocks but " + llvm::Twine(sequence.spanPages.size()) +
                   " span-page flags");
  const SpanScaling &scaling = sequence.spanScaling;
  if (!(scaling.temperature > 0) || !std::isfinite(scaling.temperature) ||
      !(scaling.massScale > 0) || !std::isfinite(scaling.massScale))
    return batchError(index, "span scaling needs a positive finite "
                             "temperature and mass scale");
  if (!limits.spanScalingRefusal.empty() && !sequence.spanPages.empty() &&
      !scaling.isIdentity())
    return batchError(index, limits.spanScalingRefusal);
  if (!sequence.keyMass.empty() && !limits.keyMassRefusal.empty())
    return batchError(index, limits.keyMassRefusal);
  if (!sequence.queryIndices.empty()) {
    if (!limits.queryIndicesRefusal.empty())
      return batchError(index, limits.queryIndicesRefusal);
    if (!sequence.keyMass.empty())
      return batchError(index, "a key-mass probe's tokens are the last of "
                               "its page list (no query indices)");
    if (int64_t(sequence.queryIndices.size()) != count)
      return batchError(index, llvm::Twine(sequence.queryIndices.size()) +
                                   " query indices for " + llvm::Twine(count) +
                                   " tokens");
  }
  length = 0;
  for (size_t page = 0; page < sequence.blockIds.size(); ++page) {
    int32_t block = sequence.blockIds[page];
    int32_t valid = sequence.validTokens[page];
    if (block < 0 || block >= limits.numBlocks)
      return batchError(index, "block id " + llvm::Twine(block) +
                                   " outside the storage's " +
                                   llvm::Twine(limits.numBlocks) + " blocks");
    if (valid < 0 || valid > limits.blockSize)
      return batchError(index, "page " + llvm::Twine(page) + " has " +
                                   llvm::Twine(valid) +
                                   " valid tokens (block size " +
                                   llvm::Twine(limits.blockSize) + ")");
    length += valid;
  }
  if (!sequence.keyMass.empty() && int64_t(sequence.keyMass.size()) != length)
    return batchError(index, llvm::Twine(sequence.keyMass.size()) +
                                 " key-mass entries for a page list of " +
                                 llvm::Twine(length) + " tokens");
  if (length < count)
    return batchError(index, "page list holds " + llvm::Twine(length) +
                                 " tokens, fewer than the " +
                                 llvm::Twine(count) + " new ones");
  if (length > limits.numPositions)
    return batchError(
        index, "length " + llvm::Twine(length) + " exceeds the RoPE table (" +
                   llvm::Twine(limits.numPositions) + " positions)");
  for (size_t token = 0; token < sequence.queryIndices.size(); ++token) {
    const int32_t query = sequence.queryIndices[token];
    if (query < 0 || query >= length ||
        (token > 0 && query <= sequence.queryIndices[token - 1]))
      return batchError(index, "query index " + llvm::Twine(query) +
                                   " of token " + llvm::Twine(token) +
                                   " is not increasing inside [0, " +
                                   llvm::Twine(length) + ")");
  }
  for (int64_t token = 0; token < count; ++token) {
    int32_t id = sequence.tokens[size_t(token)];
    if (id < 0 || uint32_t(id) >= limits.vocabSize)
      return batchError(index, "token " + llvm::Twine(token) + " has id " +
                                   llvm::Twine(id) + ", vocabulary is " +
                                   llvm::Twine(limits.vocabSize));
    int32_t position =
        ropePosition(sequence, length, token, limits.ropeInKernel);
    if (position < 0 || position >= limits.numPositions)
      return batchError(index, "position " + llvm::Twine(position) +
                                   " outside [0, " +
                                   llvm::Twine(limits.numPositions) + ")");
  }
  return llvm::Error::success();
}

} // namespace spanc::model
