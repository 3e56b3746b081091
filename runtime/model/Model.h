//===- Model.h - A Llama-family decoder: its file, shape and weights
//-------===//
//
// Model::load opens a GGUF file, reads its configuration, packs its weights
// for the CPU's GEMMs (or, for a device backend, only maps the file) and
// builds the RoPE table. It describes the model and how its arithmetic
// rounds (Numerics, ModelOptions); the backends run it: the CPU pass in
// runtime/backend/cpu/ForwardPass.h, the CUDA backend on a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_MODEL_H
#define SPANC_RUNTIME_MODEL_MODEL_H

#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"
#include "runtime/kernels/cpu/Rope.h"
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
  /// Who runs the bf16 GEMMs: spanc's AMX kernel where the CPU has AMX,
  /// its AVX-512 BF16 kernel where it has only that (oneDNN otherwise), or
  /// either by name, or oneDNN always (for comparisons).
  cpu::GemmKernel gemmKernel = cpu::GemmKernel::Amx;
  /// Keep a bf16 copy of every 4/8-bit projection for the panel kernels'
  /// prompt GEMMs instead of unpacking the 4/8-bit tiles per call
  /// (GemmEngine::borrowQuantized): 2 bytes a weight resident (SmolLM2:
  /// +221 MiB) for about the same 512-token prefill. Only the panel
  /// kernels (AMX, AVX-512 BF16) borrow; oneDNN always packs its own copy.
  bool gemmWeightCopy = false;
  /// Positions the RoPE table covers; 0 = the model's context length.
  int64_t maxPositions = 0;
  /// Decode rows multiply the 4/8-bit weights in place (QuantGemv, int8
  /// activations) instead of the packed bf16/f32 copy; false sends them
  /// through the packed GEMMs too. Ignored with forceF32.
  bool quantizedDecode = true;
  /// Prompt rows multiply the 4/8-bit weights in place with int8
  /// activations too, as decode rows and llama.cpp's CPU backend do, where
  /// the prompt GEMMs would be f32 (CPUs without native bf16) and the CPU
  /// multiplies many int8 rows faster (cpu::hasQuantGemmKernel: AVX-512
  /// VNNI, or AVX2 for Q4_1): such layers then keep no f32 copy of their
  /// weights, and each row's products are the decode rows' bits. false
  /// keeps prompt rows on the f32 GEMM. Needs quantizedDecode and the
  /// default numerics.
  bool quantizedPrompt = true;
  /// Store K and V as f16, as llama.cpp's default KV cache does
  /// (backend::kvStorageConfigFor); false keeps them exact in f32.
  bool halfPrecisionKv = true;
  /// Numerics::LlamaCpp overrides forceF32, quantizedDecode and
  /// halfPrecisionKv.
  Numerics numerics = Numerics::Default;
  /// Pack the weights for the CPU forward pass. false loads only the
  /// configuration, the mapped file and the RoPE table, for a backend that
  /// uploads the file's tensors to a device itself (the CUDA backend): an
  /// 8B model then costs no host copy. The CPU pass then refuses to run.
  bool hostWeights = true;
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

  /// Whether decode rows multiply the 4/8-bit weights in place
  /// (ModelOptions::quantizedDecode, where the CPU has the kernel).
  bool quantizedDecodeRows() const { return quantizedDecode; }
  /// Whether prompt rows do too, in every layer (ModelOptions::
  /// quantizedPrompt, where it applies; in a model of mixed formats only
  /// the layers marked LayerWeights::quantizedOnly do).
  bool quantizedPromptRows() const { return quantizedPrompt; }
  /// Whether K/V are stored as f16 (ModelOptions::halfPrecisionKv).
  bool halfPrecisionKv() const { return halfKv; }
  /// llama.cpp's RoPE shape (Numerics::LlamaCpp).
  const cpu::LlamaCppRopeShape &llamaRopeShape() const { return llamaRope; }
  /// The GEMM engine the weights were packed for (the CPU pass multiplies
  /// with it).
  cpu::GemmEngine &gemmEngine() const { return *gemm; }

private:
  Model() = default;

  std::unique_ptr<GgufFile> gguf;
  ModelConfig modelConfig;
  std::unique_ptr<cpu::GemmEngine> gemm;
  bool quantizedDecode = false;
  bool quantizedPrompt = false;
  bool halfKv = true;
  Numerics modelNumerics = Numerics::Default;
  cpu::LlamaCppRopeShape llamaRope; ///< for Numerics::LlamaCpp
  std::unique_ptr<ModelWeights> modelWeights;
  cpu::RopeTable ropeTable;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_MODEL_H
