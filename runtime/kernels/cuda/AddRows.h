//===- AddRows.h - Residual and bias additions on CUDA devices ------------===//
//
// The additions the forward pass needs outside the GEMMs' epilogue (which
// already adds with GemmProblem::accumulate): a residual added row by row
// (cpu::addInPlace) and a bias vector added to every row (Q|K|V biases of
// Qwen2-style models).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ADDROWS_H
#define SPANC_RUNTIME_KERNELS_CUDA_ADDROWS_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

namespace spanc::cuda {

/// x[r][c] += y[r][c], x rows `shape.outputStride` apart, y rows
/// `shape.inputStride` apart.
Status addInPlace(const RowShape &shape, float *x, const float *y,
                  Stream stream);

/// x[r][c] += bias[c], x rows `shape.outputStride` apart.
Status addBias(const RowShape &shape, float *x, const float *bias,
               Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ADDROWS_H
