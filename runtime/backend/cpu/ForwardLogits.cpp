//===- ForwardLogits.cpp - The CPU pass's output head ---------------------===//
//
// Gathers the rows whose logits the step asks for, norms them and projects
// them onto the vocabulary: the 4/8-bit head for last-token rows, the packed
// GEMM for full-sequence logits (perplexity).
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/backend/cpu/OpTimer.h"

#include <cstring>

namespace spanc::backend {

llvm::Error CpuForwardPass::logits(const StepLayout &step, bool logitRowsKept,
                                   model::ForwardOutput &output) {
  OpTimer timer(profiling, opProfile.outputHeadSeconds);
  const model::ModelConfig &config = model.config();
  const int64_t dim = config.embeddingDim;
  const int64_t numRows = step.numLogitRows();
  // Row r of `hidden` if the last layer kept only these rows, in this
  // order (keepLogitRows).
  for (int64_t row = 0; row < numRows; ++row) {
    const int64_t token =
        logitRowsKept ? row : int64_t(step.logitTokens[size_t(row)]);
    std::memcpy(selected.data() + row * dim, hidden.data() + token * dim,
                sizeof(float) * size_t(dim));
  }
  normalize(cpu::RowShape{numRows, dim, dim, dim}, selected.data(),
            model.weights().outputNorm().data(), selected.data());
  const cpu::PackedQuantMatrix *head = model.weights().quantizedOutput();
  // The 4/8-bit head serves every last-token row (its rows are independent
  // of each other); full-sequence logits (perplexity) take the packed GEMM.
  const bool llamaNumerics = model.numerics() == model::Numerics::LlamaCpp;
  if (head &&
      (llamaNumerics || (model.quantizedDecodeRows() && !step.anyAllLogits))) {
    cpu::quantizeActivations(selected.data(), numRows, dim, dim, head->format,
                             quantizedActivations);
    cpu::quantGemv(*head, quantizedActivations, output.logits.data(),
                   config.vocabSize);
    return llvm::Error::success();
  }
  auto gemmHead = model.weights().output();
  if (!gemmHead)
    return gemmHead.takeError();
  return model.gemmEngine().multiply(**gemmHead, selected.data(), numRows,
                                     output.logits.data());
}

} // namespace spanc::backend
