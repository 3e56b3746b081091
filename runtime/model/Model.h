//===- Model.h - A Llama-family decoder and its batched CPU forward pass --===//
//
// Model::load opens a GGUF file, reads its configuration and packs its
// weights; Model::forward runs one step for a batch of sequences. Each
// sequence brings its new tokens, their RoPE positions and its page list
// (block ids + valid tokens per block) over a KvStorage: the new tokens are
// the last tokens.size() logical tokens of that page list, their K/V are
// written into those slots, and they attend causally to everything before
// them in the list. So one call serves chunked prefill (many tokens of one
// sequence), batched decode (one token each of several sequences) and span
// queries (page lists that skip other spans' blocks).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_MODEL_H
#define SPANC_RUNTIME_MODEL_MODEL_H

#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/kernels/cpu/Rope.h"
#include "runtime/kv/KvStorage.h"
#include "runtime/model/Forward.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Weights.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <vector>

namespace spanc::model {

/// How the forward pass rounds.
enum class Numerics {
  /// The fastest path: bf16 (AMX) or f32 GEMMs for prefill, int8 GEMVs for
  /// decode-size steps, f32 attention.
  Default,
  /// llama.cpp's CPU arithmetic on a Q4_1/Q8_0 GGUF, for token-for-token
  /// comparisons: every projection multiplies the file's blocks with
  /// activations quantized per block of 32 (Q8_1/Q8_0, scales in f16), K/V
  /// rounded to f16, and attention with flash attention's f16 query and
  /// f16 value accumulator (HalfAccumulatingAttention.h). Slower prefill
  /// (no AMX GEMM); needs rotated-K storage.
  LlamaCpp,
};

llvm::StringRef numericsName(Numerics numerics);
/// "default" or "llama" (also "llama.cpp").
std::optional<Numerics> parseNumerics(llvm::StringRef name);

struct ModelOptions {
  /// Force f32 GEMMs (debugging, bit-closer comparisons); otherwise bf16
  /// where the CPU multiplies bf16 natively.
  bool forceF32 = false;
  /// Who runs the bf16 GEMMs: spanc's AMX kernel where the CPU has AMX
  /// (oneDNN otherwise), or oneDNN always (for comparisons).
  cpu::GemmKernel gemmKernel = cpu::GemmKernel::Amx;
  /// Positions the RoPE table covers; 0 = the model's context length.
  int64_t maxPositions = 0;
  /// Decode rows multiply the 4/8-bit weights in place (QuantGemv, int8
  /// activations) instead of the packed bf16/f32 copy; false sends them
  /// through the packed GEMMs too. Ignored with forceF32.
  bool quantizedDecode = true;
  /// Store K and V as f16, as llama.cpp's default KV cache does
  /// (kvStorageConfig's precision); false keeps them exact in f32.
  bool halfPrecisionKv = true;
  /// Numerics::LlamaCpp overrides forceF32, quantizedDecode and
  /// halfPrecisionKv.
  Numerics numerics = Numerics::Default;
  /// Pack the weights for the CPU forward pass. false loads only the
  /// configuration, the mapped file and the RoPE table, for a backend that
  /// uploads the file's tensors to a device itself (the CUDA backend): an
  /// 8B model then costs no host copy. forward() then fails.
  bool hostWeights = true;
};

/// Wall time per kind of op, summed over forward() calls (for profiles).
struct ForwardProfile {
  double embeddingSeconds = 0, normSeconds = 0, qkvSeconds = 0, ropeSeconds = 0,
         kvWriteSeconds = 0, attentionSeconds = 0, attentionOutputSeconds = 0,
         gateUpSeconds = 0, swiGluSeconds = 0, downSeconds = 0,
         residualSeconds = 0, outputHeadSeconds = 0;
  int64_t tokens = 0;
  ForwardProfile &operator+=(const ForwardProfile &other) {
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
    tokens += other.tokens;
    return *this;
  }
  double total() const {
    return embeddingSeconds + normSeconds + qkvSeconds + ropeSeconds +
           kvWriteSeconds + attentionSeconds + attentionOutputSeconds +
           gateUpSeconds + swiGluSeconds + downSeconds + residualSeconds +
           outputHeadSeconds;
  }
};

class Model {
public:
  static llvm::Expected<std::unique_ptr<Model>>
  load(llvm::StringRef path, const ModelOptions &options = {});

  const ModelConfig &config() const { return modelConfig; }
  /// The RoPE the forward pass applies (ReRoPE relocation must turn stored
  /// keys by exactly these angles).
  const cpu::RopeConfig &ropeConfig() const { return ropeTable.config(); }
  const GgufFile &file() const { return *gguf; }
  cpu::GemmPrecision gemmPrecision() const { return gemm->precision(); }
  cpu::GemmKernel gemmKernel() const { return gemm->kernel(); }
  Numerics numerics() const { return modelNumerics; }
  const ModelWeights &weights() const { return *modelWeights; }
  /// Whether the CPU forward pass can run (ModelOptions::hostWeights).
  bool hasHostWeights() const { return modelWeights != nullptr; }
  /// The RoPE table the forward pass rotates with (a device backend copies
  /// its rows, so both devices rotate by the very same values).
  const cpu::RopeTable &rope() const { return ropeTable; }

  /// The KV storage shape this model needs (callers pick numBlocks,
  /// blockSize and whether K is stored rotated).
  kv::KvStorageConfig kvStorageConfig(int64_t numBlocks, int blockSize = 16,
                                      bool keysRotated = true) const;

  /// Runs one step. Decode sequences (RowKind) come before prompt
  /// sequences in `batch`. Checks every sequence (token ids, positions within
  /// the RoPE table, block ids within the storage, enough valid slots) and
  /// fails with the sequence index before touching the cache. With
  /// rope-in-kernel storage (keys unrotated) queries are rotated at their
  /// logical index and `positions` are ignored.
  llvm::Error forward(llvm::ArrayRef<ForwardSequence> batch,
                      kv::KvStorage &storage, ForwardOutput &output);
  /// Runs only layers [0, numLayers) of a step, writing their K/V, and
  /// returns no logits (every sequence must ask for none): a blend's
  /// selection pass (sched::BlendTask).
  llvm::Error forwardLayers(llvm::ArrayRef<ForwardSequence> batch,
                            kv::KvStorage &storage, uint32_t numLayers);

  /// Turns the per-op timers on (a small cost per op) and reads them.
  void enableProfile(bool enabled) { profiling = enabled; }
  const ForwardProfile &profile() const { return opProfile; }
  void resetProfile() { opProfile = ForwardProfile(); }

private:
  Model() = default;
  void reserve(int64_t numTokens);
  llvm::Error runLayers(llvm::ArrayRef<ForwardSequence> batch,
                        kv::KvStorage &storage, ForwardOutput &output,
                        uint32_t numLayers);
  /// gate|up, SwiGLU and down of one layer for a decode-size step (int8
  /// GEMVs) in one parallel region; reads `normed`, writes `projected`.
  llvm::Error feedForwardFused(const LayerWeights &layer, int64_t numTokens);

  std::unique_ptr<GgufFile> gguf;
  ModelConfig modelConfig;
  std::unique_ptr<cpu::GemmEngine> gemm;
  bool quantizedDecode = false;
  bool halfPrecisionKv = true;
  Numerics modelNumerics = Numerics::Default;
  cpu::LlamaCppRopeShape llamaRope; ///< for Numerics::LlamaCpp
  cpu::QuantizedActivations quantizedActivations, feedForwardActivations;
  std::unique_ptr<ModelWeights> modelWeights;
  cpu::RopeTable ropeTable;
  cpu::AttentionWorkspace attentionWorkspace;
  std::vector<float> massScores, massQueries; ///< accumulateKeyMass scratch

  // Activations, sized for the largest step so far.
  int64_t capacity = 0;
  std::vector<float> hidden, normed, queryKeyValue, attention, projected,
      gateUp, feedForward, selected;
  std::vector<int32_t> tokenIds, ropePositions, queryOffsets, pageOffsets,
      blockIds, validTokens;
  std::vector<uint8_t> decodeSequences;
  std::vector<uint8_t> spanPages; ///< per page, for the attention kernel
  std::vector<cpu::SpanScaling> spanScalings;   ///< per sequence
  std::vector<int32_t> slotBlocks, slotIndices; ///< where each new token goes

  bool profiling = false;
  ForwardProfile opProfile;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_MODEL_H
