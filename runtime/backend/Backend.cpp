//===- Backend.cpp - A device that runs forward steps over paged K/V ------===//

#include "runtime/backend/Backend.h"

#include <algorithm>

namespace spanc::backend {

// Anchors the vtable here.
Backend::~Backend() = default;

llvm::Error Backend::forward(llvm::ArrayRef<model::ForwardSequence> batch,
                             model::ForwardOutput &output) {
  if (llvm::Error error = buildStepLayout(batch, stepLimits(), step))
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
  if (llvm::Error error = buildStepLayout(batch, stepLimits(), step))
    return error;
  return runStep(step, nullptr, std::min(layers, numLayers()));
}

} // namespace spanc::backend
