//===- Model.cpp - A Llama-family decoder: its file, shape and weights ----===//

#include "runtime/model/Model.h"

#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"
#include "runtime/kernels/cpu/QuantGemv.h"

#include <algorithm>

namespace spanc::model {

namespace {

cpu::RopeConfig ropeConfigOf(const ModelConfig &config,
                             const std::vector<float> &frequencyFactors) {
  cpu::RopeConfig rope;
  rope.headDim = int(config.headDim);
  rope.rotaryDim = int(config.rotaryDim);
  rope.order = config.ropeOrder == RopeOrder::NeoX ? cpu::RopeOrder::NeoX
                                                   : cpu::RopeOrder::Normal;
  rope.theta = config.ropeTheta;
  switch (config.ropeScaling) {
  case RopeScalingType::None:
    rope.scaling = cpu::RopeScaling::None;
    break;
  case RopeScalingType::Linear:
    rope.scaling = cpu::RopeScaling::Linear;
    break;
  case RopeScalingType::Yarn:
    rope.scaling = cpu::RopeScaling::Yarn;
    break;
  }
  rope.factor = config.ropeScalingFactor;
  rope.originalContext = int(config.ropeOriginalContext);
  rope.freqFactors = frequencyFactors;
  return rope;
}

/// Whether every layer's rows all take its 4/8-bit tiles.
bool allLayersQuantizedOnly(const ModelWeights &weights) {
  for (const LayerWeights &layer : weights.layers())
    if (!layer.quantizedOnly)
      return false;
  return !weights.layers().empty();
}

} // namespace

llvm::StringRef numericsName(Numerics numerics) {
  return numerics == Numerics::LlamaCpp ? "llama" : "default";
}

std::optional<Numerics> parseNumerics(llvm::StringRef name) {
  if (name == "default")
    return Numerics::Default;
  if (name == "llama" || name == "llama.cpp")
    return Numerics::LlamaCpp;
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<Model>>
Model::load(llvm::StringRef path, const ModelOptions &options) {
  std::unique_ptr<Model> model(new Model());
  auto file = GgufFile::open(path);
  if (!file)
    return file.takeError();
  model->gguf = std::move(*file);
  auto config = ModelConfig::fromGguf(*model->gguf);
  if (!config)
    return config.takeError();
  model->modelConfig = std::move(*config);
  const ModelConfig &modelConfig = model->modelConfig;
  if (modelConfig.numHeads % modelConfig.numKvHeads != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: %u attention heads are not a multiple of %u KV heads",
        path.str().c_str(), modelConfig.numHeads, modelConfig.numKvHeads);
  model->gemm = std::make_unique<cpu::GemmEngine>(
      options.forceF32 ? cpu::GemmPrecision::F32 : cpu::defaultGemmPrecision(),
      options.gemmKernel);
  model->modelNumerics = options.numerics;
  model->halfKv = options.halfPrecisionKv;
  if (!options.hostWeights) {
    // A device backend reads the file's tensors itself; only the RoPE
    // table (ReRoPE's angles, the reference positions) is needed here,
    // and the small tensors are checked for NaN as the host's load does.
    if (llvm::Error error = checkFiniteVectors(*model->gguf))
      return error;
    auto factors = loadRopeFrequencyFactors(*model->gguf, modelConfig);
    if (!factors)
      return factors.takeError();
    int64_t positions =
        options.maxPositions > 0
            ? options.maxPositions
            : std::max<int64_t>(modelConfig.contextLength, 4096);
    model->ropeTable =
        cpu::RopeTable(ropeConfigOf(modelConfig, *factors), positions);
    return model;
  }
  model->quantizedDecode =
      !options.forceF32 && cpu::hasQuantGemvKernel() && options.quantizedDecode;
  // Where the prompt GEMMs would be f32 (no native bf16), a layer whose
  // 4/8-bit tiles the CPU multiplies many rows of in int8 keeps only those
  // (ModelOptions::quantizedPrompt).
  const bool quantizedOnlyLayers =
      model->quantizedDecode && options.quantizedPrompt &&
      options.numerics == Numerics::Default &&
      model->gemm->precision() == cpu::GemmPrecision::F32;
  // llama.cpp numerics apply their own SwiGLU to separate gate|up products.
  auto weights = ModelWeights::load(
      *model->gguf, modelConfig, *model->gemm,
      /*gatedFeedForward=*/options.numerics != Numerics::LlamaCpp,
      /*borrowQuantized=*/!options.gemmWeightCopy, quantizedOnlyLayers);
  if (!weights)
    return weights.takeError();
  model->modelWeights = std::move(*weights);
  model->quantizedPrompt =
      quantizedOnlyLayers && allLayersQuantizedOnly(*model->modelWeights);
  if (options.numerics == Numerics::LlamaCpp) {
    // Every step multiplies the file's blocks (where VNNI is missing, the
    // AVX2 and portable GEMVs compute the same integer sums).
    if (!cpu::hasLlamaCppNumerics() || !cpu::hasHalfAccumulatingAttention())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "llama.cpp numerics need AVX-512 (llama.cpp's own kernels there)");
    if (modelConfig.ropeScaling == RopeScalingType::Yarn)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "%s: llama.cpp numerics do not cover YaRN RoPE scaling",
          path.str().c_str());
    cpu::LlamaCppRopeShape &rope = model->llamaRope;
    rope.headDim = int(modelConfig.headDim);
    rope.rotaryDim = int(modelConfig.rotaryDim);
    rope.neox = modelConfig.ropeOrder == RopeOrder::NeoX;
    rope.base = modelConfig.ropeTheta;
    rope.linearScale = modelConfig.ropeScaling == RopeScalingType::Linear
                           ? 1.0f / modelConfig.ropeScalingFactor
                           : 1.0f;
    const std::vector<float> &factors =
        model->modelWeights->ropeFrequencyFactors();
    rope.frequencyFactors = factors.empty() ? nullptr : factors.data();
    model->halfKv = true;
    model->quantizedDecode = true;
    for (const LayerWeights &layer : model->modelWeights->layers())
      if (!layer.hasQuantized)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "%s: llama.cpp numerics need Q4_1/Q8_0 projection weights",
            path.str().c_str());
  }
  // A model whose every logits row takes the GEMM head packs it now, so
  // its first step costs what later ones do (ModelWeights::output()).
  if (!model->quantizedDecode && options.numerics != Numerics::LlamaCpp)
    if (auto head = model->modelWeights->output(); !head)
      return head.takeError();
  // The tensors are packed: the mapping's pages go back (the embedding's
  // rows come back from the page cache as tokens need them), so the file
  // is not counted twice against the process (docs/ARCHITECTURE.md,
  // "Memory").
  model->gguf->releaseTensorPages();
  int64_t positions = options.maxPositions > 0
                          ? options.maxPositions
                          : std::max<int64_t>(modelConfig.contextLength, 4096);
  model->ropeTable = cpu::RopeTable(
      ropeConfigOf(modelConfig, model->modelWeights->ropeFrequencyFactors()),
      positions);
  return model;
}

} // namespace spanc::model
