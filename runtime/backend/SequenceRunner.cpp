//===- SequenceRunner.cpp - One sequence: prefill, decode, scoring --------===//

#include "runtime/backend/SequenceRunner.h"

#include "runtime/backend/CpuBackend.h"

#include <cmath>

namespace spanc::backend {

llvm::Expected<std::unique_ptr<SequenceRunner>>
SequenceRunner::create(model::Model &model, int64_t maxTokens, int blockSize,
                       std::unique_ptr<Backend> device) {
  std::unique_ptr<SequenceRunner> runner(
      new SequenceRunner(model, maxTokens, blockSize));
  if (device) {
    runner->backend = std::move(device);
    return runner;
  }
  int64_t numBlocks = (maxTokens + blockSize - 1) / blockSize;
  auto cpu = CpuBackend::create(model, std::max<int64_t>(1, numBlocks),
                                unsigned(blockSize), /*keysRotated=*/true);
  if (!cpu)
    return cpu.takeError();
  runner->cpu = &(*cpu)->pass();
  runner->backend = std::move(*cpu);
  return runner;
}

void SequenceRunner::reset() {
  numTokens = 0;
  blockIds.clear();
  validTokens.clear();
  positions.clear();
}

llvm::Expected<llvm::ArrayRef<float>>
SequenceRunner::append(llvm::ArrayRef<int32_t> tokens, int64_t chunkSize,
                       bool allLogits) {
  if (numTokens + int64_t(tokens.size()) > maxTokens)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "sequence of %lld tokens would exceed the runner's %lld",
        (long long)(numTokens + int64_t(tokens.size())), (long long)maxTokens);
  const int64_t vocab = engineModel.config().vocabSize;
  if (allLogits)
    allRows.resize(tokens.size() * size_t(vocab));
  for (size_t start = 0; start < tokens.size(); start += size_t(chunkSize)) {
    size_t count = std::min(tokens.size() - start, size_t(chunkSize));
    const size_t savedPages = blockIds.size();
    const int32_t savedLastValid = validTokens.empty() ? 0 : validTokens.back();
    positions.clear();
    for (size_t index = 0; index < count; ++index) {
      int64_t position = numTokens + int64_t(index);
      positions.push_back(int32_t(position));
      if (position % blockSize == 0) {
        blockIds.push_back(int32_t(position / blockSize));
        validTokens.push_back(0);
      }
      ++validTokens.back();
    }
    bool lastChunk = start + count == tokens.size();
    model::ForwardSequence sequence{tokens.slice(start, count), positions,
                                    blockIds, validTokens,
                                    allLogits   ? model::LogitsRequest::All
                                    : lastChunk ? model::LogitsRequest::Last
                                                : model::LogitsRequest::None};
    if (llvm::Error error = backend->forward(sequence, output)) {
      // Roll the page list back to what the cache holds.
      blockIds.resize(savedPages);
      validTokens.resize(savedPages);
      if (savedPages > 0)
        validTokens.back() = savedLastValid;
      return error;
    }
    numTokens += int64_t(count);
    if (allLogits)
      std::copy(output.logits.begin(), output.logits.end(),
                allRows.begin() + int64_t(start) * vocab);
  }
  if (allLogits)
    return llvm::ArrayRef<float>(allRows);
  return llvm::ArrayRef<float>(output.logits);
}

llvm::Expected<PerplexityResult>
computePerplexity(SequenceRunner &runner, llvm::ArrayRef<int32_t> tokens,
                  int64_t contextSize, int32_t bosToken, int64_t maxChunks) {
  PerplexityResult result;
  const int64_t vocab = runner.model().config().vocabSize;
  int64_t numChunks = int64_t(tokens.size()) / contextSize;
  if (maxChunks > 0)
    numChunks = std::min(numChunks, maxChunks);
  if (numChunks == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "perplexity: %zu tokens are fewer than "
                                   "one context of %lld",
                                   tokens.size(), (long long)contextSize);
  double totalNll = 0;
  std::vector<int32_t> chunk;
  for (int64_t index = 0; index < numChunks; ++index) {
    chunk.assign(tokens.begin() + index * contextSize,
                 tokens.begin() + (index + 1) * contextSize);
    if (bosToken >= 0)
      chunk[0] = bosToken;
    runner.reset();
    auto logits = runner.append(chunk, contextSize, /*allLogits=*/true);
    if (!logits)
      return logits.takeError();
    // Score the second half: logits at i predict token i + 1.
    for (int64_t position = contextSize / 2; position + 1 < contextSize;
         ++position) {
      const float *row = logits->data() + position * vocab;
      float maxLogit = row[0];
      for (int64_t id = 1; id < vocab; ++id)
        maxLogit = std::max(maxLogit, row[id]);
      double sum = 0;
      for (int64_t id = 0; id < vocab; ++id)
        sum += std::exp(double(row[id]) - maxLogit);
      int32_t next = tokens[size_t(index * contextSize + position + 1)];
      totalNll += std::log(sum) + maxLogit - row[next];
      ++result.scoredTokens;
    }
    ++result.chunks;
  }
  result.meanNegativeLogLikelihood = totalNll / double(result.scoredTokens);
  result.perplexity = std::exp(result.meanNegativeLogLikelihood);
  return result;
}

} // namespace spanc::backend
