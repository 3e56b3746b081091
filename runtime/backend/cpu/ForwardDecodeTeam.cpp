//===- ForwardDecodeTeam.cpp - A decode step's layers in one parallel region =//
//
// A decode step runs each layer as a dozen short kernels. As parallel
// regions of their own they cost a fork and join each (~0.8 us on two
// cores, ~180 a token: 7 % of a token), and the other threads idle through
// every one-row kernel (norms, quantization, RoPE, the K/V write). Here a
// step of a few decode rows on the 4/8-bit weights runs all its layers in
// one region: the threads split each GEMV's output rows as the separate
// kernels do, meet at a barrier (~0.2 us) where one's output is the next
// one's input, and each normalizes and quantizes the few activation rows
// itself instead of waiting while one thread does. Every element comes
// from the same function on the same inputs as on the kernel-by-kernel
// path, so the bits are the same (ForwardTest,
// DecodeInOneRegionGivesTheKernelPathsBits).
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/Rope.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace spanc::backend {

namespace {

/// The most rows a team step takes: each thread normalizes and quantizes
/// every row itself, which costs more than the barriers it saves past a
/// few rows (a batch of many decode rows also amortizes its forks).
constexpr int64_t kMaxTeamRows = 4;

/// A range [begin, end) of groups or columns.
struct Range {
  int64_t begin, end;
};

/// Thread `thread` of `threads`' contiguous share of a GEMV's groups of
/// kGroupRows output rows (so each core's prefetcher streams one run of
/// the weights).
Range groupShare(const cpu::PackedQuantMatrix &weights, int thread,
                 int threads) {
  return {weights.groups * thread / threads,
          weights.groups * (thread + 1) / threads};
}

/// The output columns a share of groups writes.
Range columnsOf(const cpu::PackedQuantMatrix &weights, Range share) {
  const int64_t rows = cpu::PackedQuantMatrix::kGroupRows;
  return {std::min(share.begin * rows, weights.rows),
          std::min(share.end * rows, weights.rows)};
}

/// Thread 0's clock between the phases of a layer (the others wait at the
/// same barriers, so its intervals are the step's).
class PhaseClock {
public:
  explicit PhaseClock(bool enabled) : enabled(enabled) {
    if (enabled)
      last = std::chrono::steady_clock::now();
  }
  void lap(double &counter) {
    if (!enabled)
      return;
    const auto now = std::chrono::steady_clock::now();
    counter += std::chrono::duration<double>(now - last).count();
    last = now;
  }

private:
  bool enabled;
  std::chrono::steady_clock::time_point last;
};

} // namespace

bool CpuForwardPass::canRunLayersInTeam(const StepLayout &step,
                                        uint32_t numLayers) const {
  const model::ModelConfig &config = model.config();
  if (!layersInTeam || model.numerics() == model::Numerics::LlamaCpp ||
      numTokens == 0 || quantizedRows != numTokens ||
      numTokens > kMaxTeamRows || config.feedForwardDim % 32 != 0 ||
      omp_get_max_threads() < 2 || omp_in_parallel())
    return false;
  for (uint32_t index = 0; index < numLayers; ++index)
    if (!model.weights().layers()[index].hasQuantized)
      return false;
  // A repair's key-mass probe runs its own parallel regions.
  for (const model::ForwardSequence &sequence : step.sequences)
    if (!sequence.keyMass.empty())
      return false;
  return true;
}

void CpuForwardPass::runLayersInTeam(const StepLayout &step, KvStorage &storage,
                                     uint32_t numLayers) {
  ++opProfile.passesInOneRegion;
  const int64_t rowFloats = numTokens * model.config().embeddingDim;
  const size_t maxThreads = size_t(omp_get_max_threads());
  if (teamScratch.size() < maxThreads)
    teamScratch.resize(maxThreads);
  for (TeamScratch &scratch : teamScratch)
    if (scratch.normed.size() < size_t(rowFloats))
      scratch.normed.resize(size_t(rowFloats));
  // Every layer attends over the same batch: planned once here, each
  // layer's call runs the plan on every thread (planning at each layer on
  // one thread and handing the plan over cost ~1.4 us a layer).
  teamAttentionPlan = cpu::planPagedAttention(
      attentionShape, attentionBatch, storage.layerView(0), attentionOptions,
      attentionWorkspace, int(maxThreads));
#pragma omp parallel
  {
    const int thread = omp_get_thread_num(), threads = omp_get_num_threads();
    for (uint32_t layerIndex = 0; layerIndex < numLayers; ++layerIndex)
      layerInTeam(model.weights().layers()[layerIndex], layerIndex, step,
                  storage, thread, threads);
  }
}

void CpuForwardPass::layerInTeam(const model::LayerWeights &layer,
                                 uint32_t layerIndex, const StepLayout &step,
                                 KvStorage &storage, int thread, int threads) {
  const model::ModelConfig &config = model.config();
  const int64_t rows = numTokens;
  const int64_t dim = config.embeddingDim;
  const int64_t headDim = config.headDim;
  const int64_t queryDim = int64_t(config.numHeads) * headDim;
  const int64_t kvDim = int64_t(config.numKvHeads) * headDim;
  const int64_t qkvDim = queryDim + 2 * kvDim;
  const cpu::RowShape hiddenRows{rows, dim, dim, dim};
  TeamScratch &mine = teamScratch[size_t(thread)];
  PhaseClock clock(profiling && thread == 0);
  // This thread's share of y = x W (rows of `stride` floats); returns the
  // columns of y it wrote.
  auto multiplyOwnShare = [&](const cpu::PackedQuantMatrix &weights,
                              const cpu::QuantizedActivations &x, float *y,
                              int64_t stride) {
    const Range share = groupShare(weights, thread, threads);
    cpu::quantGemvGroups(weights, x, y, stride, share.begin, share.end);
    return columnsOf(weights, share);
  };
  // Adds this thread's columns of `projected` into the residual stream.
  auto addOwnColumns = [&](Range columns) {
    cpu::addInPlace(cpu::RowShape{rows, columns.end - columns.begin, dim, dim},
                    hidden.data() + columns.begin,
                    projected.data() + columns.begin);
  };

  // Attention half. Every thread: the norm and int8 rows of its own.
  normalize(hiddenRows, hidden.data(), layer.attentionNorm.data(),
            mine.normed.data());
  cpu::quantizeActivations(mine.normed.data(), rows, dim, dim,
                           layer.queryKeyValueQuantized.format,
                           mine.activations);
  clock.lap(opProfile.normSeconds);
  {
    const Range columns =
        multiplyOwnShare(layer.queryKeyValueQuantized, mine.activations,
                         queryKeyValue.data(), qkvDim);
    if (!layer.queryKeyValueBias.empty())
      cpu::addBias(
          cpu::RowShape{rows, columns.end - columns.begin, qkvDim, qkvDim},
          queryKeyValue.data() + columns.begin,
          layer.queryKeyValueBias.data() + columns.begin);
  }
#pragma omp barrier
  clock.lap(opProfile.qkvSeconds);
  // The first thread rotates the queries while the last rotates the keys
  // (unless the kernel does) and writes them: the same per-head RoPE either
  // way, in half the wait.
  if (thread == 0) {
    cpu::applyRope(cpu::RopeShape{rows, int64_t(config.numHeads), qkvDim},
                   model.rope(), step.positions.data(), queryKeyValue.data());
    clock.lap(opProfile.ropeSeconds);
  }
  if (thread == threads - 1) {
    if (!ropeInKernel)
      cpu::applyRope(cpu::RopeShape{rows, int64_t(config.numKvHeads), qkvDim},
                     model.rope(), step.positions.data(),
                     queryKeyValue.data() + queryDim);
    storage.writeTokens(int(layerIndex), rows, step.slotBlocks.data(),
                        step.slotIndices.data(),
                        queryKeyValue.data() + queryDim,
                        queryKeyValue.data() + queryDim + kvDim, qkvDim);
    // The down projection's int8 rows (written by every thread below) take
    // this layer's format; the barrier orders it before their writes.
    cpu::prepareActivations(rows, config.feedForwardDim,
                            layer.downQuantized.format, feedForwardActivations);
  }
#pragma omp barrier
  clock.lap(opProfile.kvWriteSeconds);
  cpu::pagedAttentionPlannedInTeam(
      teamAttentionPlan, attentionShape, attentionBatch,
      storage.layerView(int(layerIndex)), queryKeyValue.data(),
      attention.data(), attentionOptions, attentionWorkspace);
  clock.lap(opProfile.attentionSeconds);
  cpu::quantizeActivations(attention.data(), rows, queryDim, queryDim,
                           layer.attentionOutputQuantized.format,
                           mine.activations);
  addOwnColumns(multiplyOwnShare(layer.attentionOutputQuantized,
                                 mine.activations, projected.data(), dim));
#pragma omp barrier
  clock.lap(opProfile.attentionOutputSeconds);

  // Feed-forward half.
  normalize(hiddenRows, hidden.data(), layer.feedForwardNorm.data(),
            mine.normed.data());
  cpu::quantizeActivations(mine.normed.data(), rows, dim, dim,
                           layer.gateUpQuantized.format, mine.activations);
  clock.lap(opProfile.normSeconds);
  gateUpShare(layer, mine.activations, thread, threads);
#pragma omp barrier
  clock.lap(opProfile.gateUpSeconds);
  addOwnColumns(multiplyOwnShare(layer.downQuantized, feedForwardActivations,
                                 projected.data(), dim));
#pragma omp barrier
  clock.lap(opProfile.downSeconds);
}

} // namespace spanc::backend
