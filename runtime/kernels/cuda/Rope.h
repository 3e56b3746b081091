//===- Rope.h - Rotary position embedding on CUDA devices -----------------===//
//
// Rotates the Q (and, with K stored rotated, K) heads of each token at its
// position, reading cos/sin from a device copy of the CPU's RopeTable
// (Types.h: RopeTableView), so both devices turn by the same values; the
// pair arithmetic is RopeMath.h's, shared with a host test.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ROPE_H
#define SPANC_RUNTIME_KERNELS_CUDA_ROPE_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// Rows of `numHeads` heads of table.headDim floats (cpu::RopeShape).
struct RopeShape {
  int64_t rows = 0;
  int64_t numHeads = 0;
  int64_t rowStride = 0; ///< floats between rows
};

/// Rotates every head of row r at positions[r] (device memory; each in
/// [0, table.numPositions), checked by the caller).
Status applyRope(const RopeShape &shape, const RopeTableView &table,
                 const int32_t *positions, float *x, Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ROPE_H
