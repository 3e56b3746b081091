//===- Backend.cpp - A device that runs forward steps over paged K/V ------===//

#include "runtime/backend/Backend.h"

#include <algorithm>
#include <chrono>

namespace spanc::backend {

ForwardProfile &ForwardProfile::operator+=(const ForwardProfile &other) {
  embeddingSeconds += other.embeddingSeconds;
  normSeconds += other.normSeconds;
  qkvSeconds += other.qkvSeconds;
  ropeSeconds += other.ropeSeconds;
  kvWriteSeconds += other.kvWriteSeconds;
  attentionSeconds += other.attentionSeconds;
  attentionOutputSeconds += other.attentionOutputSeconds;
  gateUpSeconds += other.gateUpSeconds;
  swiGluSeconds += other.swiGluSeconds;
  downSeconds += other.downSeconds;
  residualSeconds += other.residualSeconds;
  outputHeadSeconds += other.outputHeadSeconds;
  layoutSeconds += other.layoutSeconds;
  tokens += other.tokens;
  passes += other.passes;
  layers += other.layers;
  passesInOneRegion += other.passesInOneRegion;
  tokenLayers += other.tokenLayers;
  attentionPairs += other.attentionPairs;
  kvOnlyRows += other.kvOnlyRows;
  kvOnlyPairs += other.kvOnlyPairs;
  return *this;
}

double ForwardProfile::total() const {
  return embeddingSeconds + normSeconds + qkvSeconds + ropeSeconds +
         kvWriteSeconds + attentionSeconds + attentionOutputSeconds +
         gateUpSeconds + swiGluSeconds + downSeconds + residualSeconds +
         outputHeadSeconds;
}

// Anchors the vtable here.
Backend::~Backend() = default;

void Backend::setProfiling(bool enabled) {
  profiling = enabled;
  enableOpTimers(enabled);
}

ForwardProfile Backend::profile() const {
  ForwardProfile result = opProfile();
  result.layoutSeconds = stepProfile.layoutSeconds;
  result.tokens = stepProfile.tokens;
  result.passes = stepProfile.passes;
  result.layers = stepProfile.layers;
  result.tokenLayers = stepProfile.tokenLayers;
  result.attentionPairs = stepProfile.attentionPairs;
  return result;
}

void Backend::resetProfile() {
  stepProfile = ForwardProfile();
  resetOpProfile();
}

llvm::Error Backend::layOut(llvm::ArrayRef<model::ForwardSequence> batch,
                            uint32_t layers) {
  const auto start = profiling ? std::chrono::steady_clock::now()
                               : std::chrono::steady_clock::time_point();
  if (llvm::Error error = buildStepLayout(batch, stepLimits(), step))
    return error;
  if (profiling) {
    stepProfile.layoutSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    stepProfile.tokens += step.numTokens();
    ++stepProfile.passes;
    stepProfile.layers += layers;
    stepProfile.tokenLayers += step.numTokens() * layers;
    stepProfile.attentionPairs += step.attentionPairs() * layers;
  }
  return llvm::Error::success();
}

llvm::Error Backend::forward(llvm::ArrayRef<model::ForwardSequence> batch,
                             model::ForwardOutput &output) {
  if (llvm::Error error = layOut(batch, numLayers()))
    return error;
  return runStep(step, &output, numLayers());
}

llvm::Error Backend::forwardLayers(llvm::ArrayRef<model::ForwardSequence> batch,
                                   uint32_t layers) {
  for (size_t index = 0; index < batch.size(); ++index)
    if (batch[index].logits != model::LogitsRequest::None)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "forwardLayers: sequence %zu asks for logits", index);
  if (llvm::Error error = layOut(batch, std::min(layers, numLayers())))
    return error;
  return runStep(step, nullptr, std::min(layers, numLayers()));
}

} // namespace spanc::backend
