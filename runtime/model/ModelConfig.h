//===- ModelConfig.h - Decoder hyperparameters from GGUF metadata ---------===//
//
// Everything the forward pass needs to know about a Llama-family decoder
// (Llama 2/3, SmolLM2 — which GGUF calls "llama" —, Mistral, Qwen2), read
// from the `<arch>.*` metadata keys and checked for consistency, plus the
// facts only the tensor list tells (tied output head, QKV bias).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_MODELCONFIG_H
#define SPANC_RUNTIME_MODEL_MODELCONFIG_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace spanc::model {

class GgufFile;

enum class ModelFamily { Llama, Mistral, Qwen2 };

/// Normal: rotate adjacent pairs (x[2i], x[2i+1]); NeoX: rotate halves
/// (x[i], x[i + d/2]).
enum class RopeOrder { Normal, NeoX };
enum class RopeScalingType { None, Linear, Yarn };

struct ModelConfig {
  std::string architecture; ///< general.architecture ("llama", "qwen2", ...)
  std::string name;         ///< general.name, or "" when absent
  ModelFamily family = ModelFamily::Llama;

  uint32_t numLayers = 0;
  uint32_t embeddingDim = 0;
  uint32_t feedForwardDim = 0;
  uint32_t numHeads = 0;
  uint32_t numKvHeads = 0;
  uint32_t headDim = 0;
  uint32_t vocabSize = 0;
  uint32_t contextLength = 0;
  float rmsEpsilon = 1e-5f;

  RopeOrder ropeOrder = RopeOrder::Normal;
  uint32_t rotaryDim = 0; ///< leading head dims that rotate
  float ropeTheta = 10000.0f;
  RopeScalingType ropeScaling = RopeScalingType::None;
  float ropeScalingFactor = 1.0f;
  uint32_t ropeOriginalContext = 0; ///< YaRN: the trained context length
  /// Llama 3.1-style per-frequency factors in tensor `rope_freqs.weight`.
  bool hasRopeFrequencyFactors = false;

  /// No `output.weight`: logits reuse `token_embd.weight`.
  bool tiedOutput = false;
  /// `blk.N.attn_{q,k,v}.bias` present (Qwen2).
  bool qkvBias = false;

  /// Reads and validates the configuration; errors name the key at fault.
  static llvm::Expected<ModelConfig> fromGguf(const GgufFile &file);

  /// FLOPs (a multiply-add is two) of one token through one layer's
  /// weight multiplications: QKV, attention output, gate|up and down.
  double projectionFlopsPerLayer() const;
  /// FLOPs of one row through one layer's QKV projection alone.
  double queryKeyValueFlopsPerRow() const;
  /// FLOPs of one query token attending to one key in one layer: QK^T
  /// and PV over every query head.
  double attentionFlopsPerPair() const;
  /// FLOPs of one row of logits.
  double outputHeadFlopsPerRow() const;
  /// FLOPs of a causal prefill of `tokens` fresh tokens (token i sees i + 1
  /// keys) that returns the last token's logits: every layer's projections
  /// and attention, but in the last layer only the last token's past the
  /// QKV projection (the others' outputs are not read), and one row of
  /// logits.
  /// Norms, RoPE and softmax are left out: linear in the length and small.
  double prefillFlops(int64_t tokens) const;
};

/// The context length a file declares (`<arch>.context_length`), without
/// reading the rest of the configuration: nullopt for a file without an
/// architecture or that key (a tokenizer-only GGUF) or with a value outside
/// [1, kernels::kMaxContextLength].
std::optional<uint32_t> declaredContextLength(const GgufFile &file);

const char *modelFamilyName(ModelFamily family);
const char *ropeOrderName(RopeOrder order);
const char *ropeScalingName(RopeScalingType scaling);

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_MODELCONFIG_H
