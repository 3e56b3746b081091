//===- Weights.h - A decoder's weights, converted once for the CPU --------===//
//
// Loads the tensors of a Llama-family GGUF model into the form the CPU
// forward pass multiplies with: each projection dequantized and packed once
// into the GEMM kernel's layout (bf16 or f32, GemmEngine decides), Q|K|V fused
// into one matrix and gate|up into another so a layer runs four GEMMs, norms as
// f32 vectors. The token embedding stays in the mapped file in its GGUF type
// and is dequantized row by row on lookup. Every tensor's presence, type and
// shape is checked; errors name the tensor.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_WEIGHTS_H
#define SPANC_RUNTIME_MODEL_WEIGHTS_H

#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Quantization.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace spanc::model {

class GgufFile;

struct LayerWeights {
  std::vector<float> attentionNorm; ///< [embeddingDim]
  std::vector<float> feedForwardNorm;
  /// The prompt GEMMs' weights: borrowed from the 4/8-bit tiles below where
  /// the engine can (GemmEngine::borrowQuantized: no bf16 copy), else a
  /// packed copy. Rows: numHeads*headDim of Q, then numKvHeads*headDim of
  /// K, then of V.
  cpu::GemmWeights queryKeyValue;
  std::vector<float> queryKeyValueBias; ///< same rows; empty without bias
  cpu::GemmWeights attentionOutput;     ///< [embeddingDim][numHeads*headDim]
  /// Rows: feedForwardDim of gate, then feedForwardDim of up; packed for
  /// GemmEngine::multiplyGated (the SwiGLU in the GEMM) when isGated().
  cpu::GemmWeights gateUp;
  cpu::GemmWeights down; ///< [embeddingDim][feedForwardDim]

  /// The same projections repacked from their 4/8-bit file blocks, for
  /// decode-size steps (QuantGemv) and the borrowed GEMM weights above; set
  /// only when every one is Q4_1 or Q8_0. The GEMM weights point into
  /// these matrices' bytes: they move together.
  bool hasQuantized = false;
  /// Set with hasQuantized where ModelWeights::load was asked for
  /// quantized-only layers: the GEMM weights above are empty, and every
  /// row of the layer multiplies the 4/8-bit tiles (Model::
  /// quantizedPromptRows).
  bool quantizedOnly = false;
  /// Rows stacked as in the packed GEMM weights above.
  cpu::PackedQuantMatrix queryKeyValueQuantized, attentionOutputQuantized,
      gateUpQuantized, downQuantized;
};

class ModelWeights {
public:
  /// Reads every tensor the configuration calls for from `file` (which must
  /// outlive the weights: the embedding is read from its mapping).
  /// `gatedFeedForward` packs gate|up for multiplyGated (the default
  /// SwiGLU); without it gate|up is a plain GEMM weight. `borrowQuantized`:
  /// 4/8-bit projections lend their tiles to the GEMMs where the engine can
  /// (GemmEngine::borrowQuantized); false packs a copy of each.
  /// `quantizedOnly`: a layer whose four projections are in formats the CPU
  /// multiplies many rows of in int8 (cpu::hasQuantGemmKernel) keeps only
  /// the 4/8-bit tiles (LayerWeights::quantizedOnly), no GEMM weights.
  static llvm::Expected<std::unique_ptr<ModelWeights>>
  load(const GgufFile &file, const ModelConfig &config, cpu::GemmEngine &engine,
       bool gatedFeedForward = true, bool borrowQuantized = true,
       bool quantizedOnly = false);

  const cpu::EmbeddingTable &tokenEmbedding() const { return embedding; }
  llvm::ArrayRef<LayerWeights> layers() const { return layerWeights; }
  const std::vector<float> &outputNorm() const { return finalNorm; }
  /// The output head for the GEMM. When the 4/8-bit head exists it serves
  /// every last-token row, so this one is made at the first call that needs
  /// it (full-sequence logits, or a model run without the 4/8-bit head):
  /// borrowed from the 4/8-bit head where the engine can, else a packed copy
  /// (SmolLM2: 57 MiB, and twice that in f32 while packing).
  /// Thread-safe; an error (out of memory) is returned to every caller.
  llvm::Expected<const cpu::GemmWeights *> output() const;
  /// The output head in its file blocks, when Q4_1 or Q8_0.
  const cpu::PackedQuantMatrix *quantizedOutput() const {
    return hasQuantizedOutput ? &outputQuantized : nullptr;
  }
  /// Per-pair RoPE frequency divisors (Llama 3.1), or empty.
  const std::vector<float> &ropeFrequencyFactors() const { return ropeFreqs; }
  /// Bytes of packed weights, 4/8-bit and GEMM copies (not the mapped
  /// file; the GEMM head counts once output() has packed it).
  int64_t packedBytes() const;

private:
  ModelWeights() = default;

  GgmlType embeddingType = GgmlType::F32; ///< the decoder's context
  cpu::EmbeddingTable embedding;
  std::vector<LayerWeights> layerWeights;
  std::vector<float> finalNorm;
  /// What output() packs from, checked at load.
  const GgufFile *file = nullptr;
  cpu::GemmEngine *engine = nullptr;
  std::string headName;
  uint64_t headRows = 0;
  mutable std::once_flag headPacked;
  mutable cpu::GemmWeights outputHead;
  mutable std::string headError;
  bool hasQuantizedOutput = false;
  bool borrowHead = false; ///< output() borrows outputQuantized
  cpu::PackedQuantMatrix outputQuantized;
  std::vector<float> ropeFreqs;
};

/// Fails, naming the tensor and element, when a vector tensor of `file`
/// (norm weights, biases, RoPE factors: the small f32 tensors a single NaN
/// makes useless) holds a NaN or infinity. ModelWeights::load checks every
/// tensor it dequantizes; this is the check for a model whose weights live
/// on a device.
llvm::Error checkFiniteVectors(const GgufFile &file);

/// The per-pair RoPE frequency divisors (`rope_freqs.weight`, Llama 3.1),
/// or none when the configuration has none: what the RoPE table needs
/// without the rest of the weights (a model whose weights live on a GPU).
llvm::Expected<std::vector<float>>
loadRopeFrequencyFactors(const GgufFile &file, const ModelConfig &config);

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_WEIGHTS_H
