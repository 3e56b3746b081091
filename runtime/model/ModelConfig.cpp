//===- ModelConfig.cpp - Decoder hyperparameters from GGUF metadata -------===//

#include "runtime/model/ModelConfig.h"

#include "runtime/kernels/Limits.h"
#include "runtime/model/Gguf.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace spanc::model {

namespace {

Error configError(const GgufFile &file, const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (Twine(file.name()) + ": " + message).str());
}

/// Reads `<arch>.<suffix>` as a uint32 (with a default when `fallback` is
/// set), rejecting values that do not fit.
Error readCount(const GgufFile &file, StringRef arch, StringRef suffix,
                uint32_t &out, std::optional<uint32_t> fallback = {}) {
  std::string key = (arch + "." + suffix).str();
  Expected<uint64_t> value =
      fallback ? file.getUnsigned(key, *fallback) : file.getUnsigned(key);
  if (!value)
    return value.takeError();
  if (*value > std::numeric_limits<uint32_t>::max())
    return configError(file, "metadata key '" + key + "' is " + Twine(*value) +
                                 ", too large");
  out = static_cast<uint32_t>(*value);
  return Error::success();
}

std::string formatFloat(float value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

Error readFloat(const GgufFile &file, StringRef arch, StringRef suffix,
                float &out, std::optional<float> fallback = {}) {
  std::string key = (arch + "." + suffix).str();
  Expected<double> value =
      fallback ? file.getFloat(key, *fallback) : file.getFloat(key);
  if (!value)
    return value.takeError();
  out = static_cast<float>(*value);
  return Error::success();
}

} // namespace

Expected<ModelConfig> ModelConfig::fromGguf(const GgufFile &file) {
  ModelConfig config;
  Expected<StringRef> architecture = file.getString("general.architecture");
  if (!architecture)
    return architecture.takeError();
  config.architecture = architecture->str();
  Expected<StringRef> name = file.getString("general.name", "");
  if (!name)
    return name.takeError();
  config.name = name->str();

  std::optional<ModelFamily> family =
      llvm::StringSwitch<std::optional<ModelFamily>>(*architecture)
          .Case("llama", ModelFamily::Llama)
          .Case("mistral", ModelFamily::Mistral)
          .Case("qwen2", ModelFamily::Qwen2)
          .Default(std::nullopt);
  if (!family)
    return configError(file, "unsupported architecture '" + *architecture +
                                 "' (supported: llama, mistral, qwen2)");
  config.family = *family;
  // llama.cpp's rope type per architecture: Qwen2 rotates halves.
  config.ropeOrder =
      *family == ModelFamily::Qwen2 ? RopeOrder::NeoX : RopeOrder::Normal;

  StringRef arch = *architecture;
  if (Error error = readCount(file, arch, "block_count", config.numLayers))
    return error;
  if (Error error =
          readCount(file, arch, "embedding_length", config.embeddingDim))
    return error;
  if (Error error =
          readCount(file, arch, "feed_forward_length", config.feedForwardDim))
    return error;
  if (Error error =
          readCount(file, arch, "attention.head_count", config.numHeads))
    return error;
  if (Error error = readCount(file, arch, "attention.head_count_kv",
                              config.numKvHeads, config.numHeads))
    return error;
  if (Error error =
          readCount(file, arch, "context_length", config.contextLength))
    return error;
  if (Error error = readFloat(file, arch, "attention.layer_norm_rms_epsilon",
                              config.rmsEpsilon, 1e-5f))
    return error;
  if (Error error =
          readFloat(file, arch, "rope.freq_base", config.ropeTheta, 10000.0f))
    return error;

  if (config.numLayers == 0 || config.embeddingDim == 0 ||
      config.numHeads == 0 || config.numKvHeads == 0 ||
      config.feedForwardDim == 0)
    return configError(file, "block_count, embedding_length, "
                             "feed_forward_length and the head counts must "
                             "be positive");
  if (config.contextLength == 0 ||
      config.contextLength > uint64_t(kernels::kMaxContextLength))
    return configError(file, "context_length " + Twine(config.contextLength) +
                                 " must be in [1, " +
                                 Twine(kernels::kMaxContextLength) + "]");
  if (config.numHeads % config.numKvHeads != 0)
    return configError(file, "attention.head_count " + Twine(config.numHeads) +
                                 " is not a multiple of head_count_kv " +
                                 Twine(config.numKvHeads));
  // Without attention.key_length the head dimension is embedding_length /
  // head_count, which must then divide exactly.
  if (!file.contains((arch + ".attention.key_length").str()) &&
      config.embeddingDim % config.numHeads != 0)
    return configError(file, "embedding_length " + Twine(config.embeddingDim) +
                                 " is not a multiple of attention.head_count " +
                                 Twine(config.numHeads) +
                                 " (and no attention.key_length gives the "
                                 "head dimension)");
  uint32_t defaultHeadDim = config.embeddingDim / config.numHeads;
  if (Error error = readCount(file, arch, "attention.key_length",
                              config.headDim, defaultHeadDim))
    return error;
  // The kernels' fixed arrays bound the head (runtime/kernels/Limits.h).
  if (config.headDim == 0 || config.headDim % 2 != 0 ||
      config.headDim > uint32_t(kernels::kMaxHeadDim))
    return configError(file, "attention.key_length (head dimension) " +
                                 Twine(config.headDim) +
                                 " must be even and in [2, " +
                                 Twine(kernels::kMaxHeadDim) + "]");
  // V is as wide as K here (one head dimension for both).
  uint32_t valueDim = 0;
  if (Error error = readCount(file, arch, "attention.value_length", valueDim,
                              config.headDim))
    return error;
  if (valueDim != config.headDim)
    return configError(file, "attention.value_length " + Twine(valueDim) +
                                 " differs from attention.key_length " +
                                 Twine(config.headDim) +
                                 " (unsupported: keys and values must have "
                                 "one head dimension)");
  if (Error error = readCount(file, arch, "rope.dimension_count",
                              config.rotaryDim, config.headDim))
    return error;
  // 0 rotates nothing: the model runs without positions and answers
  // differently, with no error.
  if (config.rotaryDim == 0 || config.rotaryDim > config.headDim ||
      config.rotaryDim % 2 != 0)
    return configError(file, "rope.dimension_count " + Twine(config.rotaryDim) +
                                 " must be even and in [2, " +
                                 Twine(config.headDim) +
                                 "] (the head dimension)");
  // Finite too: an infinite base or epsilon ran and answered garbage.
  if (!(config.ropeTheta > 0.0f) || !std::isfinite(config.ropeTheta))
    return configError(file, "rope.freq_base " + formatFloat(config.ropeTheta) +
                                 " must be positive and finite");
  if (!(config.rmsEpsilon > 0.0f) || !std::isfinite(config.rmsEpsilon))
    return configError(file, "attention.layer_norm_rms_epsilon " +
                                 formatFloat(config.rmsEpsilon) +
                                 " must be positive and finite");

  // RoPE scaling: `rope.scaling.type` (with `rope.scaling.factor`), or the
  // older `rope.scale_linear`.
  std::string scalingKey = (arch + ".rope.scaling.type").str();
  Expected<StringRef> scaling = file.getString(scalingKey, "none");
  if (!scaling)
    return scaling.takeError();
  std::optional<RopeScalingType> scalingType =
      llvm::StringSwitch<std::optional<RopeScalingType>>(*scaling)
          .Case("none", RopeScalingType::None)
          .Case("linear", RopeScalingType::Linear)
          .Case("yarn", RopeScalingType::Yarn)
          .Default(std::nullopt);
  if (!scalingType)
    return configError(file, "metadata key '" + scalingKey + "' is '" +
                                 *scaling +
                                 "' (supported: none, linear, yarn)");
  config.ropeScaling = *scalingType;
  if (Error error = readFloat(file, arch, "rope.scaling.factor",
                              config.ropeScalingFactor, 1.0f))
    return error;
  if (config.ropeScaling == RopeScalingType::None &&
      file.contains((arch + ".rope.scale_linear").str())) {
    if (Error error = readFloat(file, arch, "rope.scale_linear",
                                config.ropeScalingFactor))
      return error;
    config.ropeScaling = RopeScalingType::Linear;
  }
  if (config.ropeScaling == RopeScalingType::None)
    config.ropeScalingFactor = 1.0f;
  if (!(config.ropeScalingFactor > 0.0f) ||
      !std::isfinite(config.ropeScalingFactor))
    return configError(file, "rope.scaling.factor " +
                                 formatFloat(config.ropeScalingFactor) +
                                 " must be positive and finite");
  if (Error error =
          readCount(file, arch, "rope.scaling.original_context_length",
                    config.ropeOriginalContext, config.contextLength))
    return error;
  if (config.ropeScaling == RopeScalingType::Yarn &&
      (config.ropeOriginalContext == 0 ||
       config.ropeOriginalContext > uint64_t(kernels::kMaxContextLength)))
    return configError(file, "rope.scaling.original_context_length " +
                                 Twine(config.ropeOriginalContext) +
                                 " must be in [1, " +
                                 Twine(kernels::kMaxContextLength) + "]");
  config.hasRopeFrequencyFactors = file.findTensor("rope_freqs.weight");

  // The vocabulary: token_embd.weight is [embedding, vocab].
  Expected<const GgufTensor *> embedding = file.getTensor("token_embd.weight");
  if (!embedding)
    return embedding.takeError();
  const GgufTensor &tokenEmbedding = **embedding;
  if (tokenEmbedding.shape.size() != 2 ||
      tokenEmbedding.shape[0] != config.embeddingDim ||
      tokenEmbedding.shape[1] > std::numeric_limits<uint32_t>::max())
    return configError(file, "tensor 'token_embd.weight' must have shape "
                             "[" +
                                 Twine(config.embeddingDim) + ", vocab]");
  config.vocabSize = static_cast<uint32_t>(tokenEmbedding.shape[1]);
  if (config.vocabSize == 0)
    return configError(file, "tensor 'token_embd.weight' has no rows: the "
                             "vocabulary is empty");
  if (const GgufValue *tokens = file.find("tokenizer.ggml.tokens"))
    if (tokens->arraySize() != config.vocabSize)
      return configError(file, "tokenizer.ggml.tokens has " +
                                   Twine(tokens->arraySize()) +
                                   " entries but token_embd.weight has " +
                                   Twine(config.vocabSize) + " rows");

  config.tiedOutput = !file.findTensor("output.weight");
  config.qkvBias = file.findTensor("blk.0.attn_q.bias") != nullptr;
  return config;
}

std::optional<uint32_t> declaredContextLength(const GgufFile &file) {
  Expected<StringRef> architecture = file.getString("general.architecture");
  if (!architecture) {
    llvm::consumeError(architecture.takeError());
    return std::nullopt;
  }
  Expected<uint64_t> length =
      file.getUnsigned((*architecture + ".context_length").str());
  if (!length) {
    llvm::consumeError(length.takeError());
    return std::nullopt;
  }
  if (*length == 0 || *length > uint64_t(kernels::kMaxContextLength))
    return std::nullopt;
  return uint32_t(*length);
}

const char *modelFamilyName(ModelFamily family) {
  switch (family) {
  case ModelFamily::Llama:
    return "llama";
  case ModelFamily::Mistral:
    return "mistral";
  case ModelFamily::Qwen2:
    return "qwen2";
  }
  return "unknown";
}

const char *ropeOrderName(RopeOrder order) {
  return order == RopeOrder::NeoX ? "neox" : "normal";
}

const char *ropeScalingName(RopeScalingType scaling) {
  switch (scaling) {
  case RopeScalingType::None:
    return "none";
  case RopeScalingType::Linear:
    return "linear";
  case RopeScalingType::Yarn:
    return "yarn";
  }
  return "unknown";
}

double ModelConfig::projectionFlopsPerLayer() const {
  const double dim = embeddingDim, ffn = feedForwardDim;
  const double queryDim = double(numHeads) * headDim;
  const double kvDim = double(numKvHeads) * headDim;
  return 2 * (dim * (queryDim + 2 * kvDim) + queryDim * dim + 3 * dim * ffn);
}

double ModelConfig::queryKeyValueFlopsPerRow() const {
  const double queryDim = double(numHeads) * headDim;
  const double kvDim = double(numKvHeads) * headDim;
  return 2 * double(embeddingDim) * (queryDim + 2 * kvDim);
}

double ModelConfig::attentionFlopsPerPair() const {
  return 4.0 * double(numHeads) * headDim;
}

double ModelConfig::outputHeadFlopsPerRow() const {
  return 2.0 * embeddingDim * double(vocabSize);
}

double ModelConfig::prefillFlops(int64_t tokens) const {
  if (tokens <= 0)
    return 0;
  if (numLayers == 0)
    return outputHeadFlopsPerRow();
  const double n = double(tokens);
  const double pairs = n * (n + 1) / 2;
  // The last layer: every token's QKV, the last token's row after it.
  const double lastLayer =
      n * queryKeyValueFlopsPerRow() +
      (projectionFlopsPerLayer() - queryKeyValueFlopsPerRow()) +
      n * attentionFlopsPerPair();
  return double(numLayers - 1) *
             (n * projectionFlopsPerLayer() + pairs * attentionFlopsPerPair()) +
         lastLayer + outputHeadFlopsPerRow();
}

} // namespace spanc::model
