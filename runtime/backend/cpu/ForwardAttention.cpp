//===- ForwardAttention.cpp - The CPU pass's attention block --------------===//
//
// One layer's attention half, in two: its inputs (RMS norm, the QKV
// projection and bias, RoPE, the K/V write into the step's slots, a
// repair's key-mass probe) and its outputs (paged attention over each
// sequence's page list, the output projection added into the residual
// stream). The last layer of a pass keeps only its logit rows between the
// two (ForwardPass.cpp, keepLogitRows).
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/AttentionMass.h"
#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/backend/cpu/OpTimer.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"
#include "runtime/kernels/cpu/Rope.h"

namespace spanc::backend {

llvm::Error CpuForwardPass::attentionInputs(const model::LayerWeights &layer,
                                            uint32_t layerIndex,
                                            const StepLayout &step,
                                            KvStorage &storage) {
  const model::ModelConfig &config = model.config();
  const bool llamaNumerics = model.numerics() == model::Numerics::LlamaCpp;
  const int64_t dim = config.embeddingDim;
  const int64_t headDim = config.headDim;
  const int64_t queryDim = int64_t(config.numHeads) * headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * headDim;
  const int64_t qkvDim = queryDim + 2 * kvDim;
  {
    OpTimer timer(profiling, opProfile.normSeconds);
    normalize(cpu::RowShape{numTokens, dim, dim, dim}, hidden.data(),
              layer.attentionNorm.data(), normed.data());
  }
  {
    OpTimer timer(profiling, opProfile.qkvSeconds);
    if (llvm::Error error =
            project(layer.queryKeyValue, layer.queryKeyValueQuantized,
                    rowsOnQuantized(layer), normed.data(), queryKeyValue.data(),
                    cpu::GemmOutput::Store))
      return error;
    if (!layer.queryKeyValueBias.empty())
      cpu::addBias(cpu::RowShape{numTokens, qkvDim, qkvDim, qkvDim},
                   queryKeyValue.data(), layer.queryKeyValueBias.data());
  }
  {
    OpTimer timer(profiling, opProfile.ropeSeconds);
    if (llamaNumerics) {
      cpu::LlamaCppRopeShape shape = model.llamaRopeShape();
      shape.rows = numTokens;
      shape.rowStride = qkvDim;
      shape.numHeads = config.numHeads + config.numKvHeads;
      cpu::ropeLlamaCpp(shape, step.positions.data(), queryKeyValue.data());
    } else {
      // A row is [Q heads | K heads | V heads]: one pass rotates Q and,
      // unless the attention kernel rotates the keys, K.
      const int64_t rotatedHeads =
          config.numHeads + (ropeInKernel ? 0 : config.numKvHeads);
      cpu::applyRope(cpu::RopeShape{numTokens, rotatedHeads, qkvDim},
                     model.rope(), step.positions.data(), queryKeyValue.data());
    }
  }
  {
    OpTimer timer(profiling, opProfile.kvWriteSeconds);
    // The storage rounds to its precision (f16 by default, see
    // halfPrecisionKv) and transposes K into its block layout.
    storage.writeTokens(int(layerIndex), numTokens, step.slotBlocks.data(),
                        step.slotIndices.data(),
                        queryKeyValue.data() + queryDim,
                        queryKeyValue.data() + queryDim + kvDim, qkvDim);
  }
  // A repair's probe: the attention each key receives at this layer.
  for (size_t index = 0; index < step.sequences.size(); ++index) {
    const model::ForwardSequence &sequence = step.sequences[index];
    if (sequence.keyMass.empty() || layerIndex < sequence.massFirstLayer ||
        layerIndex >= sequence.massEndLayer)
      continue;
    OpTimer timer(profiling, opProfile.attentionSeconds);
    KeyMassShape massShape{int(config.numHeads), int(config.numKvHeads),
                           int(headDim), attentionShape.scale, qkvDim};
    const int32_t firstRow = step.queryOffsets[index];
    accumulateKeyMass(massShape, queryKeyValue.data() + firstRow * qkvDim,
                      step.queryOffsets[index + 1] - firstRow,
                      sequence.blockIds, sequence.validTokens,
                      storage.layerView(int(layerIndex)),
                      ropeInKernel ? &model.rope() : nullptr,
                      sequence.keyMass.data(), massScores, massQueries);
  }
  return llvm::Error::success();
}

llvm::Error CpuForwardPass::attentionOutputs(const model::LayerWeights &layer,
                                             uint32_t layerIndex,
                                             KvStorage &storage) {
  {
    OpTimer timer(profiling, opProfile.attentionSeconds);
    if (model.numerics() == model::Numerics::LlamaCpp)
      cpu::halfAccumulatingAttention(attentionShape, attentionBatch,
                                     storage.layerView(int(layerIndex)),
                                     queryKeyValue.data(), attention.data());
    else
      cpu::pagedAttention(attentionShape, attentionBatch,
                          storage.layerView(int(layerIndex)),
                          queryKeyValue.data(), attention.data(),
                          attentionOptions, attentionWorkspace);
  }
  // The packed GEMMs add their products into the residual stream in their
  // epilogue; the 4/8-bit GEMV writes `projected`, added after.
  OpTimer timer(profiling, opProfile.attentionOutputSeconds);
  return project(layer.attentionOutput, layer.attentionOutputQuantized,
                 rowsOnQuantized(layer), attention.data(), hidden.data(),
                 cpu::GemmOutput::Accumulate);
}

} // namespace spanc::backend
