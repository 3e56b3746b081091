//===- SequenceRunner.h - One sequence: prefill, decode, scoring ----------===//
//
// The smallest user of a Backend: a single sequence over a contiguous page
// list in the backend's own K/V memory (the CPU backend unless a device's is
// given). It prefills a prompt in chunks, decodes token by token, and scores
// text (perplexity). `spanc generate`, `spanc bench engine` and the
// llama.cpp comparison tests run on it; the scheduler drives a backend with
// many sequences and the shared cache.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_SEQUENCERUNNER_H
#define SPANC_RUNTIME_BACKEND_SEQUENCERUNNER_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/model/Model.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace spanc::backend {

class SequenceRunner {
public:
  /// A runner for up to `maxTokens` tokens over block ids [0, maxTokens /
  /// blockSize]. With `device` the steps run there (`spanc generate
  /// --device=cuda`: a backend with at least that many blocks, K stored
  /// rotated); otherwise on a CPU backend made for that many (its pages
  /// are touched only when written).
  static llvm::Expected<std::unique_ptr<SequenceRunner>>
  create(model::Model &model, int64_t maxTokens, int blockSize = 16,
         std::unique_ptr<Backend> device = nullptr);

  /// Forgets the sequence (the KV memory is reused).
  void reset();
  int64_t length() const { return numTokens; }
  int64_t capacity() const { return maxTokens; }

  /// Appends `tokens` in chunks of at most `chunkSize` and returns the
  /// logits after the last one (vocabSize floats, valid until the next
  /// call). With `allLogits`, every appended token's logits are kept and
  /// returned back to back instead.
  llvm::Expected<llvm::ArrayRef<float>> append(llvm::ArrayRef<int32_t> tokens,
                                               int64_t chunkSize = 512,
                                               bool allLogits = false);

  model::Model &model() { return engineModel; }
  /// The CPU forward pass when the runner runs on the CPU (its profile),
  /// else nullptr.
  CpuForwardPass *cpuPass() { return cpu; }

private:
  SequenceRunner(model::Model &model, int64_t maxTokens, int blockSize)
      : engineModel(model), maxTokens(maxTokens), blockSize(blockSize) {}

  model::Model &engineModel;
  int64_t maxTokens;
  int blockSize;
  int64_t numTokens = 0;
  std::unique_ptr<Backend> backend;
  CpuForwardPass *cpu = nullptr;
  std::vector<int32_t> blockIds, validTokens, positions;
  model::ForwardOutput output;
  std::vector<float> allRows;
};

/// llama.cpp's perplexity protocol: the tokens are cut into chunks of
/// `contextSize`; each chunk is evaluated from an empty cache (its first
/// token replaced by `bosToken` when that is >= 0) and only the predictions
/// of its second half are scored. Returns exp(mean negative log-likelihood)
/// and the number of scored tokens.
struct PerplexityResult {
  double perplexity = 0;
  double meanNegativeLogLikelihood = 0;
  int64_t scoredTokens = 0;
  int64_t chunks = 0;
};
llvm::Expected<PerplexityResult>
computePerplexity(SequenceRunner &runner, llvm::ArrayRef<int32_t> tokens,
                  int64_t contextSize, int32_t bosToken, int64_t maxChunks = 0);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_SEQUENCERUNNER_H
