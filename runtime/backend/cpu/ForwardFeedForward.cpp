//===- ForwardFeedForward.cpp - The CPU pass's feed-forward block ---------===//
//
// One layer's MLP half: RMS norm, gate|up, SwiGLU and down, added into the
// residual stream. Decode rows take the 4/8-bit weights (fused in one
// parallel region where the width allows), prompt rows the packed GEMMs
// with SwiGLU and the residual add in their epilogues.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/ForwardPass.h"
#include "runtime/backend/cpu/OpTimer.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/LlamaCppNumerics.h"

#include <omp.h>

#include <chrono>

namespace spanc::backend {

void CpuForwardPass::gateUpShare(const model::LayerWeights &layer,
                                 const cpu::QuantizedActivations &normedRows,
                                 int thread, int threads) {
  // Thread `thread` of `threads` takes a range of 32-column blocks of the
  // FFN width: the gate and up rows of those columns (groups g and
  // g + ffnDim/16 of the stacked matrix), their SwiGLU and their
  // activation blocks, so that nothing but the down projection (which
  // reads every block) waits for the others. The arithmetic per element is
  // that of the unfused path.
  const model::ModelConfig &config = model.config();
  const int64_t ffnDim = config.feedForwardDim;
  const int64_t ffnGroups = ffnDim / cpu::PackedQuantMatrix::kGroupRows;
  const int64_t units = ffnDim / 32;
  const int64_t first = units * thread / threads;
  const int64_t end = units * (thread + 1) / threads;
  const int64_t groupsPerUnit = 32 / cpu::PackedQuantMatrix::kGroupRows;
  if (end <= first)
    return;
  cpu::quantGemvGroups(layer.gateUpQuantized, normedRows, gateUp.data(),
                       2 * ffnDim, first * groupsPerUnit, end * groupsPerUnit);
  cpu::quantGemvGroups(layer.gateUpQuantized, normedRows, gateUp.data(),
                       2 * ffnDim, ffnGroups + first * groupsPerUnit,
                       ffnGroups + end * groupsPerUnit);
  const cpu::RowShape shape{normedRows.rows, (end - first) * 32, 2 * ffnDim,
                            ffnDim};
  const float *gate = gateUp.data() + first * 32;
  const float *up = gate + ffnDim;
  float *out = feedForward.data() + first * 32;
  if (model.numerics() == model::Numerics::LlamaCpp)
    cpu::swiGluLlamaCpp(shape, gate, up, out);
  else
    cpu::swiGlu(shape, gate, up, out);
  cpu::quantizeActivationBlocks(feedForward.data(), ffnDim, first, end,
                                feedForwardActivations);
}

llvm::Error CpuForwardPass::feedForwardFused(const model::LayerWeights &layer,
                                             int64_t numRows) {
  // Decode-size steps: gate|up, SwiGLU, the quantization of its output and
  // the down projection in one parallel region with one barrier
  // (gateUpShare).
  const model::ModelConfig &config = model.config();
  const int64_t dim = config.embeddingDim;
  const int64_t ffnDim = config.feedForwardDim;
  cpu::quantizeActivations(normed.data(), numRows, dim, dim,
                           layer.gateUpQuantized.format, quantizedActivations);
  cpu::prepareActivations(numRows, ffnDim, layer.downQuantized.format,
                          feedForwardActivations);
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point middle;
#pragma omp parallel
  {
    gateUpShare(layer, quantizedActivations, omp_get_thread_num(),
                omp_get_num_threads());
#pragma omp barrier
#pragma omp master
    if (profiling)
      middle = std::chrono::steady_clock::now();
#pragma omp for schedule(static)
    for (int64_t group = 0; group < layer.downQuantized.groups; ++group)
      cpu::quantGemvGroups(layer.downQuantized, feedForwardActivations,
                           projected.data(), dim, group, group + 1);
  }
  if (profiling) {
    const auto finish = std::chrono::steady_clock::now();
    // SwiGLU runs inside the gate|up share of the region.
    opProfile.gateUpSeconds +=
        std::chrono::duration<double>(middle - start).count();
    opProfile.downSeconds +=
        std::chrono::duration<double>(finish - middle).count();
  }
  return llvm::Error::success();
}

llvm::Error CpuForwardPass::feedForwardBlock(const model::LayerWeights &layer) {
  const model::ModelConfig &config = model.config();
  const bool llamaNumerics = model.numerics() == model::Numerics::LlamaCpp;
  const int64_t dim = config.embeddingDim;
  const int64_t ffnDim = config.feedForwardDim;
  {
    OpTimer timer(profiling, opProfile.normSeconds);
    normalize(cpu::RowShape{numTokens, dim, dim, dim}, hidden.data(),
              layer.feedForwardNorm.data(), normed.data());
  }
  auto swiGluRows = [&](int64_t rows, const float *gateUpRows, float *out) {
    OpTimer timer(profiling, opProfile.swiGluSeconds);
    const cpu::RowShape shape{rows, ffnDim, 2 * ffnDim, ffnDim};
    if (llamaNumerics)
      cpu::swiGluLlamaCpp(shape, gateUpRows, gateUpRows + ffnDim, out);
    else
      cpu::swiGlu(shape, gateUpRows, gateUpRows + ffnDim, out);
  };
  // Quantized rows: gate|up, SwiGLU and down on the 4/8-bit weights (fused
  // in one parallel region where the width allows), into `projected`, then
  // added to the residual stream.
  const int64_t firstPacked = rowsOnQuantized(layer);
  if (firstPacked > 0) {
    if (ffnDim % 32 == 0) {
      if (llvm::Error error = feedForwardFused(layer, firstPacked))
        return error;
    } else {
      {
        OpTimer timer(profiling, opProfile.gateUpSeconds);
        multiplyQuantized(layer.gateUpQuantized, normed.data(), firstPacked,
                          gateUp.data());
      }
      swiGluRows(firstPacked, gateUp.data(), feedForward.data());
      OpTimer timer(profiling, opProfile.downSeconds);
      multiplyQuantized(layer.downQuantized, feedForward.data(), firstPacked,
                        projected.data());
    }
    OpTimer timer(profiling, opProfile.residualSeconds);
    cpu::addInPlace(cpu::RowShape{firstPacked, dim, dim, dim}, hidden.data(),
                    projected.data());
  }
  if (firstPacked == numTokens)
    return llvm::Error::success();
  // Packed rows: the GEMMs add the down projection into the residual
  // stream in their epilogue.
  const int64_t rows = numTokens - firstPacked;
  const float *normedRows = normed.data() + firstPacked * dim;
  cpu::GemmEngine &gemm = model.gemmEngine();
  if (layer.gateUp.isGated()) {
    // The SwiGLU runs in the GEMM's epilogue (its time counts there).
    OpTimer timer(profiling, opProfile.gateUpSeconds);
    if (llvm::Error error = gemm.multiplyGated(layer.gateUp, normedRows, rows,
                                               feedForward.data()))
      return error;
  } else {
    {
      OpTimer timer(profiling, opProfile.gateUpSeconds);
      if (llvm::Error error =
              gemm.multiply(layer.gateUp, normedRows, rows, gateUp.data()))
        return error;
    }
    swiGluRows(rows, gateUp.data(), feedForward.data());
  }
  OpTimer timer(profiling, opProfile.downSeconds);
  return gemm.multiply(layer.down, feedForward.data(), rows,
                       hidden.data() + firstPacked * dim,
                       cpu::GemmOutput::Accumulate);
}

} // namespace spanc::backend
