//===- SequenceRunner.h - One sequence: prefill, decode, scoring ----------===//
//
// The smallest user of Model::forward: a single sequence over a contiguous
// page list in its own KvStorage. It prefills a prompt in chunks, decodes
// token by token, and scores text (perplexity). `spanc generate`, `spanc
// bench engine` and the llama.cpp comparison tests run on it; the scheduler
// drives Model::forward directly with many sequences and the shared cache.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_SEQUENCERUNNER_H
#define SPANC_RUNTIME_MODEL_SEQUENCERUNNER_H

#include "runtime/kv/KvStorage.h"
#include "runtime/model/Model.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <vector>

namespace spanc::model {

class SequenceRunner {
public:
  /// Runs one step of the sequence over block ids [0, maxTokens /
  /// blockSize] of a K/V memory it owns (another device's backend).
  using ForwardFunction = std::function<llvm::Error(
      llvm::ArrayRef<ForwardSequence>, ForwardOutput &)>;

  /// A runner for up to `maxTokens` tokens (KV blocks are reserved for
  /// that many; pages are touched only when written). With `forward`, the
  /// steps run through it (`spanc generate --device=cuda`: a backend with
  /// at least that many blocks, K stored rotated) and no KvStorage is made.
  static llvm::Expected<std::unique_ptr<SequenceRunner>>
  create(Model &model, int64_t maxTokens, int blockSize = 16,
         ForwardFunction forward = nullptr);

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

  Model &model() { return engineModel; }

private:
  SequenceRunner(Model &model, int64_t maxTokens, int blockSize)
      : engineModel(model), maxTokens(maxTokens), blockSize(blockSize) {}

  Model &engineModel;
  int64_t maxTokens;
  int blockSize;
  int64_t numTokens = 0;
  std::unique_ptr<kv::KvStorage> storage;
  ForwardFunction deviceForward;
  std::vector<int32_t> blockIds, validTokens, positions;
  ForwardOutput output;
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

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_SEQUENCERUNNER_H
