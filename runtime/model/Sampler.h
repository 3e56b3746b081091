//===- Sampler.h - Next-token sampling: greedy, temperature, top-k, top-p -===//
//
// A Sampler is built per request from its parameters and a seed; the same
// parameters, seed and logits always give the same tokens (its RNG is a
// 64-bit Mersenne Twister seeded from the request, nothing global).
// Temperature 0 is greedy (ties go to the lowest token id, as in llama.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_SAMPLER_H
#define SPANC_RUNTIME_MODEL_SAMPLER_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace spanc::model {

struct SamplingParams {
  float temperature = 0.0f; ///< 0: greedy
  int topK = 0;             ///< 0: no limit
  float topP = 1.0f;        ///< 1: no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
public:
  explicit Sampler(const SamplingParams &params);

  /// Picks the next token from one row of logits.
  int32_t sample(llvm::ArrayRef<float> logits);

  const SamplingParams &params() const { return samplingParams; }

  /// The index of the largest logit (lowest index on ties).
  static int32_t argmax(llvm::ArrayRef<float> logits);

private:
  SamplingParams samplingParams;
  std::mt19937_64 rng;
  std::vector<std::pair<float, int32_t>> candidates; ///< reused per call
  std::vector<double> probabilities;                 ///< reused per call
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_SAMPLER_H
