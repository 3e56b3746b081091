//===- SpanRepair.h - Multi-pass repair of a plus's stitched spans --------===//
//
// A repair segment (kv::SpanOptions::blendPercent, guidedPercent;
// docs/ARCHITECTURE.md, "Span attention") is computed in passes before a
// step's forward batch: its blocks start as copies of the span blocks (the
// stitched cache), a first pass measures something per span token, a pure
// selection function picks the tokens to recompute, and a last pass
// recomputes them through every layer in the call's context.
//
// - blend (CacheBlend-style): the first kv::kBlendSelectionLayers layers of
//   every span token, causally; the measure is how far each token's K/V
//   moved at the last of them.
// - question-guided (after ProphetKV and FusionRAG): the segment after the
//   plus (the question) runs once over the stitched cache at its place in
//   the call; the measure is the attention each span token receives from
//   it, summed over its rows, the query heads and a band of layers.
//
// The selection functions are plain functions of those measures, so their
// rules are tested without a model.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_SPANREPAIR_H
#define SPANC_RUNTIME_SCHED_SPANREPAIR_H

#include "runtime/backend/Backend.h"
#include "runtime/kv/SpanLayout.h"
#include "runtime/model/Forward.h"
#include "runtime/sched/CallOutcome.h"
#include "runtime/sched/SchedulerOutput.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace spanc::sched {

/// The layers [first, end) of a model of `numLayers` whose attention ranks
/// span tokens in a question-guided repair.
std::pair<uint32_t, uint32_t> repairLayerBand(kv::RepairLayers layers,
                                              uint32_t numLayers);

/// A blend's choice: every token of a forced block, then the ceil(percent %
/// of all tokens) of the others that moved most (`distances`, one per
/// token; ties to the earlier token, so a hit chooses as a miss did).
/// `forced` is per token. Returns one flag per token.
std::vector<uint8_t> selectBlendTokens(llvm::ArrayRef<float> distances,
                                       llvm::ArrayRef<uint8_t> forced,
                                       uint32_t percent);

/// What a question-guided repair ranks: a span block or a span token.
struct RepairUnit {
  float mass = 0;         ///< the attention it received from the probe
  bool forced = false;    ///< recomputed anyway (a head or end block)
  bool candidate = false; ///< may be chosen (its span missed context)
  uint32_t span = 0;      ///< neighbours are taken inside one span only
};

/// A question-guided repair's choice: every forced unit, then the
/// ceil(percent % of all units) candidates (forced ones aside) that
/// received the most attention (ties to the earlier unit), then
/// `neighbours` candidates on each side of every unit so chosen, inside
/// its span. Returns one flag per unit. At 100 % every candidate is
/// chosen.
std::vector<uint8_t> selectGuidedUnits(llvm::ArrayRef<RepairUnit> units,
                                       uint32_t percent, uint32_t neighbours);

/// Runs repair tasks on a backend: the passes above, then the recompute.
class SpanRepair {
public:
  /// `numLayers`: the model's (the layer band of a guided repair).
  SpanRepair(backend::Backend &device, uint32_t numLayers)
      : device(device), numLayers(numLayers) {}

  /// Computes every repair task of `step`, before its forward batch, and
  /// adds what each recomputed and its probe's cost to `statsOf(call)`.
  /// Blends run one at a time; question-guided repairs run together: their
  /// probes in one forward pass and their recomputes in one more, so a step
  /// of many repairs pays two passes' fixed costs (thread barriers, weight
  /// reads), not two per repair.
  llvm::Error run(const SchedulerOutput &step,
                  llvm::function_ref<CallStats &(plan::CallId)> statsOf);

private:
  /// One task's view of the step, its page list and its choice.
  struct TaskState {
    const BlendTask *task = nullptr;
    llvm::ArrayRef<int32_t> tokens, positions, valid;
    /// The context's pages and every repair block; a sequence reads a
    /// prefix of it, its last page cut at its last token.
    std::vector<int32_t> pages, pageValid;
    /// A guided repair's probe: the pages above and its own blocks.
    std::vector<int32_t> probePages, probeValid;
    std::vector<float> keyMass;
    int64_t contextTokens = 0;
    std::vector<uint8_t> chosen;
    /// The recompute's per-sequence page lengths (each its last page cut).
    std::vector<int32_t> sequenceValid;
  };

  /// Fills `state` for `task` and copies the spans' blocks into the
  /// repair's: the stitched cache, which the layers and tokens the repair
  /// does not recompute keep.
  void prepare(const SchedulerOutput &step, const BlendTask &task,
               TaskState &state);
  /// Pass 1 of a blend: per token, how far its K/V move (into `measure`).
  llvm::Error measureDistances(const SchedulerOutput &step,
                               const TaskState &state);
  /// Pass 1 of a guided repair: its probe, added to `batch`.
  void addProbe(const SchedulerOutput &step, TaskState &state,
                uint32_t firstLayer, uint32_t endLayer);
  /// A guided repair's choice from the attention its probe recorded.
  void chooseGuided(const SchedulerOutput &step, TaskState &state);
  /// The last pass: the chosen tokens through every layer, added to
  /// `batch`.
  void addRecompute(TaskState &state);

  backend::Backend &device;
  uint32_t numLayers = 0;
  /// Reused from step to step.
  std::vector<TaskState> states;
  std::vector<float> measure;
  std::vector<RepairUnit> units;
  llvm::SmallVector<model::ForwardSequence, 16> batch;
  model::ForwardOutput output;
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_SPANREPAIR_H
