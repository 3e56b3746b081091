//===- ForwardPass.cpp - The CPU forward pass over a StepLayout -----------===//

#include "runtime/backend/cpu/ForwardPass.h"

#include "runtime/backend/cpu/OpTimer.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include <cmath>
#include <cstring>

namespace spanc::backend {

KvStorageConfig kvStorageConfigFor(const model::Model &model, int64_t numBlocks,
                                   int blockSize, bool keysRotated) {
  const model::ModelConfig &modelConfig = model.config();
  KvStorageConfig config;
  config.numLayers = int(modelConfig.numLayers);
  config.numKvHeads = int(modelConfig.numKvHeads);
  config.headDim = int(modelConfig.headDim);
  config.blockSize = blockSize;
  config.numBlocks = numBlocks;
  config.keysRotated = keysRotated;
  config.precision =
      model.halfPrecisionKv() ? cpu::KvPrecision::F16 : cpu::KvPrecision::F32;
  return config;
}

StepLimits cpuStepLimits(const model::Model &model, const KvStorage &storage) {
  StepLimits limits;
  limits.numBlocks = storage.numBlocks();
  limits.blockSize = storage.blockSize();
  limits.vocabSize = model.config().vocabSize;
  limits.numPositions = model.rope().numPositions();
  limits.ropeInKernel = !storage.keysRotated();
  if (model.numerics() == model::Numerics::LlamaCpp) {
    limits.spanScalingRefusal =
        "span scaling needs spanc's attention kernel, not llama.cpp numerics";
    limits.queryIndicesRefusal = "explicit query indices need spanc's "
                                 "attention kernel, not llama.cpp numerics";
  }
  return limits;
}

void CpuForwardPass::reserve(int64_t rows) {
  if (rows <= capacity)
    return;
  capacity = rows;
  const model::ModelConfig &config = model.config();
  const int64_t dim = config.embeddingDim;
  const int64_t queryDim = int64_t(config.numHeads) * config.headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * config.headDim;
  hidden.resize(size_t(rows * dim));
  normed.resize(size_t(rows * dim));
  queryKeyValue.resize(size_t(rows * (queryDim + 2 * kvDim)));
  attention.resize(size_t(rows * queryDim));
  projected.resize(size_t(rows * dim));
  gateUp.resize(size_t(rows * 2 * config.feedForwardDim));
  feedForward.resize(size_t(rows * config.feedForwardDim));
  selected.resize(size_t(rows * dim));
}

void CpuForwardPass::normalize(const cpu::RowShape &shape, const float *x,
                               const float *weight, float *out) {
  if (model.numerics() == model::Numerics::LlamaCpp)
    cpu::rmsNormDoubleSum(shape, x, weight, model.config().rmsEpsilon, out);
  else
    cpu::rmsNorm(shape, x, weight, model.config().rmsEpsilon, out);
}

void CpuForwardPass::multiplyQuantized(const cpu::PackedQuantMatrix &quantized,
                                       const float *x, int64_t rows, float *y) {
  cpu::quantizeActivations(x, rows, quantized.columns, quantized.columns,
                           quantized.format, quantizedActivations);
  cpu::quantGemv(quantized, quantizedActivations, y, quantized.rows);
}

llvm::Error CpuForwardPass::project(const cpu::GemmWeights &packed,
                                    const cpu::PackedQuantMatrix &quantized,
                                    int64_t onQuantized, const float *x,
                                    float *y, cpu::GemmOutput mode) {
  const int64_t firstPacked = onQuantized;
  if (firstPacked > 0) {
    const int64_t width = quantized.rows;
    if (mode == cpu::GemmOutput::Accumulate) {
      multiplyQuantized(quantized, x, firstPacked, projected.data());
      cpu::addInPlace(cpu::RowShape{firstPacked, width, width, width}, y,
                      projected.data());
    } else {
      multiplyQuantized(quantized, x, firstPacked, y);
    }
  }
  if (firstPacked == numTokens)
    return llvm::Error::success();
  const int64_t width = packed.rows();
  return model.gemmEngine().multiply(packed, x + firstPacked * packed.columns(),
                                     numTokens - firstPacked,
                                     y + firstPacked * width, mode);
}

void CpuForwardPass::keepLogitRows(const StepLayout &step, bool withLogits) {
  const int64_t dim = model.config().embeddingDim;
  const int64_t qkvDim = attentionShape.queryRowStride;
  int64_t kept = 0, keptQuantized = 0, droppedPairs = 0;
  keptQueryOffsets.assign(1, 0);
  keptQueryIndices.clear();
  for (int sequence = 0; sequence < step.numSequences(); ++sequence) {
    const int32_t end = step.queryOffsets[size_t(sequence) + 1];
    const int64_t firstKept =
        withLogits ? end - (step.rowOffsets[size_t(sequence) + 1] -
                            step.rowOffsets[size_t(sequence)])
                   : end;
    for (int64_t token = step.queryOffsets[size_t(sequence)]; token < end;
         ++token) {
      const int64_t index = step.queryIndex(sequence, token);
      if (token < firstKept) {
        droppedPairs += index + 1;
        continue;
      }
      // Rows move only forwards (kept <= token), one row at a time.
      if (token != kept) {
        std::memmove(hidden.data() + kept * dim, hidden.data() + token * dim,
                     sizeof(float) * size_t(dim));
        std::memmove(queryKeyValue.data() + kept * qkvDim,
                     queryKeyValue.data() + token * qkvDim,
                     sizeof(float) * size_t(qkvDim));
      }
      if (step.anyQueryIndices)
        keptQueryIndices.push_back(int32_t(index));
      keptQuantized += token < quantizedRows;
      ++kept;
    }
    keptQueryOffsets.push_back(int32_t(kept));
  }
  opProfile.kvOnlyRows += numTokens - kept;
  opProfile.kvOnlyPairs += droppedPairs;
  numTokens = kept;
  quantizedRows = keptQuantized;
  attentionBatch.queryOffsets = keptQueryOffsets.data();
  attentionBatch.queryIndices =
      step.anyQueryIndices ? keptQueryIndices.data() : nullptr;
}

llvm::Error CpuForwardPass::run(const StepLayout &step, KvStorage &storage,
                                model::ForwardOutput *output,
                                uint32_t numLayers) {
  if (!model.hasHostWeights())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: the model was loaded without host weights "
        "(ModelOptions::hostWeights); its backend runs the forward pass");
  const model::ModelConfig &config = model.config();
  const KvStorageConfig &kvConfig = storage.config();
  if (kvConfig.numLayers != int(config.numLayers) ||
      kvConfig.numKvHeads != int(config.numKvHeads) ||
      kvConfig.headDim != int(config.headDim))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: KV storage shape (%d layers, %d KV heads, head dim %d) does "
        "not match the model (%u, %u, %u)",
        kvConfig.numLayers, kvConfig.numKvHeads, kvConfig.headDim,
        config.numLayers, config.numKvHeads, config.headDim);
  ropeInKernel = !storage.keysRotated();
  const bool llamaNumerics = model.numerics() == model::Numerics::LlamaCpp;
  if (llamaNumerics && ropeInKernel)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "forward: llama.cpp numerics need K stored rotated (not "
        "rope-in-kernel)");

  numTokens = step.numTokens();
  reserve(numTokens);
  opProfile.tokens += numTokens;
  ++opProfile.passes;
  opProfile.layers += numLayers;
  // Rows [0, quantizedRows) multiply the 4/8-bit weights in place with
  // int8 activations (decode rows), the rest the packed bf16/f32 copy
  // (prompt rows): each row's path is its own (RowKind). llama.cpp
  // numerics, and hosts without native bf16 GEMMs (Model::
  // quantizedPromptRows), multiply every row on the file's blocks; in a
  // model of mixed formats a quantized-only layer does (rowsOnQuantized).
  quantizedRows = llamaNumerics || model.quantizedPromptRows() ? numTokens
                  : model.quantizedDecodeRows() ? step.numDecodeRows
                                                : 0;

  const int64_t headDim = config.headDim;
  const int64_t queryDim = int64_t(config.numHeads) * headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * headDim;
  attentionShape.numQueryHeads = int(config.numHeads);
  attentionShape.numKvHeads = int(config.numKvHeads);
  attentionShape.headDim = int(headDim);
  attentionShape.scale = 1.0f / std::sqrt(float(headDim));
  attentionShape.queryRowStride = queryDim + 2 * kvDim;
  attentionShape.outputRowStride = queryDim;
  attentionBatch = cpu::PagedAttentionBatch();
  attentionBatch.numSequences = step.numSequences();
  attentionBatch.queryOffsets = step.queryOffsets.data();
  attentionBatch.pageOffsets = step.pageOffsets.data();
  attentionBatch.blockIds = step.blockIds.data();
  attentionBatch.validTokens = step.validTokens.data();
  attentionBatch.decodeSequences = step.decodeSequences.data();
  attentionBatch.queryIndices =
      step.anyQueryIndices ? step.queryIndices.data() : nullptr;
  if (step.anySpanScaling) {
    spanScalings.clear();
    for (const model::SpanScaling &scaling : step.spanScalings)
      spanScalings.push_back(
          cpu::SpanScaling{scaling.temperature, scaling.massScale});
    attentionBatch.spanPages = step.spanPages.data();
    attentionBatch.spanScaling = spanScalings.data();
  }
  attentionOptions = cpu::PagedAttentionOptions();
  attentionOptions.keyRope = ropeInKernel ? &model.rope() : nullptr;
  // f32 GEMMs (--batch-invariant) keep attention's products in f32 too: a
  // one-token tail then gives the bits its row had inside the prompt.
  attentionOptions.allowAmx = model.gemmPrecision() == cpu::GemmPrecision::Bf16;

  {
    OpTimer timer(profiling, opProfile.embeddingSeconds);
    cpu::embeddingLookup(model.weights().tokenEmbedding(), step.tokenIds.data(),
                         numTokens, hidden.data(), config.embeddingDim);
  }
  // Past the last layer's K/V write, only the rows whose logits the pass
  // returns are read again (a pass of fewer layers returns none).
  const bool withLogits = output && numLayers == config.numLayers;
  bool logitRowsKept = false;
  if (canRunLayersInTeam(step, numLayers) &&
      (!pruneLastLayer || (withLogits && step.numLogitRows() == numTokens)))
    runLayersInTeam(step, storage, numLayers);
  else
    for (uint32_t layerIndex = 0; layerIndex < numLayers; ++layerIndex) {
      const model::LayerWeights &layer = model.weights().layers()[layerIndex];
      if (llvm::Error error = attentionInputs(layer, layerIndex, step, storage))
        return error;
      if (pruneLastLayer && layerIndex + 1 == numLayers) {
        keepLogitRows(step, withLogits);
        logitRowsKept = withLogits;
        if (numTokens == 0)
          break;
      }
      if (llvm::Error error = attentionOutputs(layer, layerIndex, storage))
        return error;
      if (llvm::Error error = feedForwardBlock(layer))
        return error;
    }
  if (!output)
    return llvm::Error::success();
  output->rowOffsets.assign(step.rowOffsets.begin(), step.rowOffsets.end());
  output->vocabSize = config.vocabSize;
  output->logits.resize(size_t(step.numLogitRows() * config.vocabSize));
  if (step.numLogitRows() == 0 || numLayers < config.numLayers)
    return llvm::Error::success();
  return logits(step, logitRowsKept, *output);
}

} // namespace spanc::backend
