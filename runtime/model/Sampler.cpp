//===- Sampler.cpp - Next-token sampling ----------------------------------===//

#include "runtime/model/Sampler.h"

#include <algorithm>
#include <cmath>

namespace spanc::model {

Sampler::Sampler(const SamplingParams &params)
    : samplingParams(params), rng(params.seed) {}

int32_t Sampler::argmax(llvm::ArrayRef<float> logits) {
  int32_t best = 0;
  for (size_t index = 1; index < logits.size(); ++index)
    if (logits[index] > logits[size_t(best)])
      best = int32_t(index);
  return best;
}

int32_t Sampler::sample(llvm::ArrayRef<float> logits) {
  if (samplingParams.temperature <= 0.0f || samplingParams.topK == 1)
    return argmax(logits);
  const size_t vocab = logits.size();
  candidates.resize(vocab);
  for (size_t index = 0; index < vocab; ++index)
    candidates[index] = {logits[index], int32_t(index)};
  // Order by logit, ties by id, so the result does not depend on the sort.
  auto higher = [](const std::pair<float, int32_t> &a,
                   const std::pair<float, int32_t> &b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = vocab;
  if (samplingParams.topK > 0 && size_t(samplingParams.topK) < vocab) {
    keep = size_t(samplingParams.topK);
    std::partial_sort(candidates.begin(), candidates.begin() + keep,
                      candidates.end(), higher);
  } else {
    std::sort(candidates.begin(), candidates.end(), higher);
  }
  // Softmax over the kept candidates at the temperature, in double.
  const double maxLogit = candidates[0].first;
  probabilities.resize(keep);
  double total = 0;
  for (size_t index = 0; index < keep; ++index) {
    probabilities[index] =
        std::exp((double(candidates[index].first) - maxLogit) /
                 samplingParams.temperature);
    total += probabilities[index];
  }
  // Nucleus: the smallest prefix whose mass reaches topP.
  if (samplingParams.topP < 1.0f) {
    double mass = 0;
    size_t cut = keep;
    for (size_t index = 0; index < keep; ++index) {
      mass += probabilities[index] / total;
      if (mass >= samplingParams.topP) {
        cut = index + 1;
        break;
      }
    }
    keep = std::max<size_t>(1, cut);
    total = 0;
    for (size_t index = 0; index < keep; ++index)
      total += probabilities[index];
  }
  double draw = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (size_t index = 0; index < keep; ++index) {
    draw -= probabilities[index];
    if (draw < 0)
      return candidates[index].second;
  }
  return candidates[keep - 1].second;
}

} // namespace spanc::model
