//===- ForwardPass.h - The CPU forward pass over a StepLayout -------------===//
//
// The CPU backend's arithmetic: one step of a Llama-family decoder over a
// StepLayout (Backend::forward checked and flattened it) and the K/V memory
// in a KvStorage. Per layer an attention block (norm, QKV, RoPE, the K/V
// write, paged attention, a repair's key-mass probe, the output projection:
// ForwardAttention.cpp) and a feed-forward block (ForwardFeedForward.cpp),
// then the logits of the rows the step asks for (ForwardLogits.cpp). The
// last layer a pass runs carries only those rows past its K/V write (the
// others' outputs would go unread); a step of a few decode rows runs its layers
// in one parallel region (ForwardDecodeTeam.cpp, the same bits). Every numerics
// rule (docs/ARCHITECTURE.md, "Numerics") lives here: decode rows multiply the
// 4/8-bit weights in place with int8 activations, prompt rows the packed
// bf16/f32 weights (or, where those would be f32, the 4/8-bit ones too:
// Model::quantizedPromptRows); llama.cpp numerics take the file's blocks
// everywhere.
// The model (runtime/model) only describes and packs weights.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPU_FORWARDPASS_H
#define SPANC_RUNTIME_BACKEND_CPU_FORWARDPASS_H

#include "runtime/backend/ForwardProfile.h"
#include "runtime/backend/StepLayout.h"
#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/model/Model.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

/// The KV storage shape `model` needs: numBlocks blocks of blockSize
/// tokens, K stored rotated or not, f16 unless the model keeps K/V exact
/// (ModelOptions::halfPrecisionKv).
KvStorageConfig kvStorageConfigFor(const model::Model &model, int64_t numBlocks,
                                   int blockSize = 16, bool keysRotated = true);

/// What the CPU pass checks a step over `storage` against.
StepLimits cpuStepLimits(const model::Model &model, const KvStorage &storage);

class CpuForwardPass {
public:
  explicit CpuForwardPass(model::Model &model) : model(model) {}

  /// Runs layers [0, numLayers) of a checked step over `storage`; with
  /// `output` and every layer run, the logits rows the step asks for.
  /// Fails before touching the cache when the model has no host weights
  /// or `storage` does not fit the model.
  llvm::Error run(const StepLayout &step, KvStorage &storage,
                  model::ForwardOutput *output, uint32_t numLayers);

  /// Turns the per-op timers on (a small cost per op) and reads them.
  void enableProfile(bool enabled) { profiling = enabled; }
  const ForwardProfile &profile() const { return opProfile; }
  void resetProfile() { opProfile = ForwardProfile(); }
  /// false: every step runs kernel by kernel, each its own parallel region
  /// (the reference the one-region decode path is tested against).
  void enableLayersInTeam(bool enabled) { layersInTeam = enabled; }
  /// false: the last layer carries every row to its end (the reference
  /// the pruned last layer is tested against: the same bits).
  void enableLastLayerPruning(bool enabled) { pruneLastLayer = enabled; }

private:
  /// Sizes the activations for a step of `numTokens` rows.
  void reserve(int64_t numTokens);
  /// RMS norm of `shape` rows with the model's rounding.
  void normalize(const cpu::RowShape &shape, const float *x,
                 const float *weight, float *out);
  /// Rows [0, rows) of x times the 4/8-bit weights, int8 activations.
  void multiplyQuantized(const cpu::PackedQuantMatrix &quantized,
                         const float *x, int64_t rows, float *y);
  /// How many of the step's first rows multiply `layer`'s 4/8-bit weights:
  /// every row in a quantized-only layer, else the quantized rows where
  /// the layer has the tiles.
  int64_t rowsOnQuantized(const model::LayerWeights &layer) const {
    return layer.quantizedOnly  ? numTokens
           : layer.hasQuantized ? quantizedRows
                                : 0;
  }
  /// A projection of every row of the step: rows [0, onQuantized) on the
  /// 4/8-bit weights into `y` (or, to accumulate, through `projected`), the
  /// others through the packed GEMM.
  llvm::Error project(const cpu::GemmWeights &packed,
                      const cpu::PackedQuantMatrix &quantized,
                      int64_t onQuantized, const float *x, float *y,
                      cpu::GemmOutput mode);

  /// ForwardAttention.cpp, the attention block's first half: from
  /// `hidden` to the step's K/V in `storage` and each row's rotated Q in
  /// `queryKeyValue` (and a repair's key-mass probe, which reads them).
  llvm::Error attentionInputs(const model::LayerWeights &layer,
                              uint32_t layerIndex, const StepLayout &step,
                              KvStorage &storage);
  /// Its second half: paged attention of the rows over their page lists,
  /// projected and added back into `hidden`.
  llvm::Error attentionOutputs(const model::LayerWeights &layer,
                               uint32_t layerIndex, KvStorage &storage);
  /// Before the last layer's second half: moves the rows whose logits the
  /// pass returns (`withLogits`; each sequence's are a suffix of its rows)
  /// to the front of `hidden` and `queryKeyValue`, and the step's row
  /// count, quantized rows and attention batch to them.
  void keepLogitRows(const StepLayout &step, bool withLogits);
  /// ForwardFeedForward.cpp: from `hidden` through the MLP back into it.
  llvm::Error feedForwardBlock(const model::LayerWeights &layer);
  /// gate|up, SwiGLU and down of one layer for a decode-size step (int8
  /// GEMVs) in one parallel region; reads `normed`, writes `projected`.
  llvm::Error feedForwardFused(const model::LayerWeights &layer,
                               int64_t numRows);
  /// Thread `thread` of `threads`' share of gate|up, SwiGLU and the
  /// quantization of its output into feedForwardActivations (prepared).
  void gateUpShare(const model::LayerWeights &layer,
                   const cpu::QuantizedActivations &normedRows, int thread,
                   int threads);

  /// ForwardDecodeTeam.cpp: whether layers [0, numLayers) of the step run
  /// in one parallel region (a few decode rows on the 4/8-bit weights).
  bool canRunLayersInTeam(const StepLayout &step, uint32_t numLayers) const;
  /// Runs them so: the same bits as the per-kernel path.
  void runLayersInTeam(const StepLayout &step, KvStorage &storage,
                       uint32_t numLayers);
  /// One layer, called by every thread of the region.
  void layerInTeam(const model::LayerWeights &layer, uint32_t layerIndex,
                   const StepLayout &step, KvStorage &storage, int thread,
                   int threads);
  /// ForwardLogits.cpp: the output norm and head over the wanted rows
  /// (`logitRowsKept`: rows [0, n) of `hidden`, keepLogitRows ran; else
  /// step.logitTokens' rows).
  llvm::Error logits(const StepLayout &step, bool logitRowsKept,
                     model::ForwardOutput &output);

  model::Model &model;

  // The step being run.
  int64_t numTokens = 0;
  /// Rows [0, quantizedRows) multiply the 4/8-bit weights in place.
  int64_t quantizedRows = 0;
  bool ropeInKernel = false;
  cpu::PagedAttentionShape attentionShape;
  cpu::PagedAttentionBatch attentionBatch;
  cpu::PagedAttentionOptions attentionOptions;
  std::vector<cpu::SpanScaling> spanScalings; ///< per sequence
  /// keepLogitRows' attention batch: each sequence's kept rows and, when
  /// the step places its rows, their logical indices.
  std::vector<int32_t> keptQueryOffsets, keptQueryIndices;

  // Scratch and activations, sized for the largest step so far.
  cpu::QuantizedActivations quantizedActivations, feedForwardActivations;
  cpu::AttentionWorkspace attentionWorkspace;
  std::vector<float> massScores, massQueries; ///< accumulateKeyMass scratch
  int64_t capacity = 0;
  // On cache-line boundaries: threads that split a GEMM's columns write
  // neighbouring parts of each row, and a row start 16 bytes into a line
  // (plain malloc) made two threads share a line at every split.
  using Activations = std::vector<float, cpu::AlignedAllocator<float>>;
  Activations hidden, normed, queryKeyValue, attention, projected, gateUp,
      feedForward, selected;

  /// Per thread of a team step (runLayersInTeam): its copy of the
  /// normalized rows and their int8 activations.
  struct TeamScratch {
    Activations normed;
    cpu::QuantizedActivations activations;
  };
  std::vector<TeamScratch> teamScratch;
  /// A team step's attention plan, made once for all of its layers.
  cpu::PagedAttentionPlan teamAttentionPlan;

  bool profiling = false;
  ForwardProfile opProfile;
  bool layersInTeam = true;
  bool pruneLastLayer = true;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPU_FORWARDPASS_H
