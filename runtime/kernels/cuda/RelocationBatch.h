//===- RelocationBatch.h - A CIDRA batch laid out for one launch ----------===//
//
// Host-only (plain C++, tested without a GPU). One batch of a
// kv::RelocationPlan (independent ops: copy or duplicate a block, turn its
// K by a position delta) becomes one launch: the ops as plain records and
// one cos/sin table per distinct delta, computed here in double from the
// exact per-pair frequencies (backend::relocationFrequencies) as the CPU's
// cpu::relocateBlocks computes them, so both devices turn by the same f32
// values. An op with delta 0 copies bits (no table, nothing rounded).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONBATCH_H
#define SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONBATCH_H

#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>
#include <vector>

namespace spanc::cuda {

/// One relocation (kv::RelocationOp): destination's K = source's K turned
/// by `delta` positions; when destination != source, V is copied too.
struct RelocationOp {
  uint32_t source = 0;
  uint32_t destination = 0;
  int64_t delta = 0;
};

/// The rotation RoPE applies per position step (cpu::RopeRotation): pair i
/// turns by frequencies[i] radians per position.
struct RelocationRotation {
  RopeOrder order = RopeOrder::Normal;
  int rotaryDim = 0;                   ///< leading head dims that rotate
  const double *frequencies = nullptr; ///< rotaryDim/2 values, host memory
};

/// An op as the kernel reads it.
struct RelocationRecord {
  uint32_t source = 0;
  uint32_t destination = 0;
  int32_t table = -1; ///< index of its cos/sin table; -1: delta 0 (copy)
};

struct RelocationBatch {
  std::vector<RelocationRecord> records;
  /// Per distinct nonzero delta: rotaryDim/2 cos then rotaryDim/2 sin.
  std::vector<float> tables;
  int rotaryDim = 0;
};

/// Lays `ops` out. Fails on a rotary dim that is odd or past the head dim,
/// a block outside the pool, or two ops writing one block.
Status buildRelocationBatch(const KvPoolView &pool,
                            const RelocationRotation &rotation,
                            const RelocationOp *ops, size_t numOps,
                            RelocationBatch &batch);

/// Thread blocks of the relocation launch: one per (op, layer, KV head).
int64_t relocationGridSize(const KvPoolView &pool, size_t numOps);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONBATCH_H
