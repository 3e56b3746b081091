//===- SwiGlu.h - The gated feed-forward activation on CUDA devices -------===//
//
// out = silu(gate) * up on the f32 output of the fused gate|up GEMM, into
// bf16 (the down projection's input) or f32. cpu::swiGlu is the reference.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_SWIGLU_H
#define SPANC_RUNTIME_KERNELS_CUDA_SWIGLU_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// out[r][c] = silu(gate[r][c]) * up[r][c], silu(g) = g / (1 + e^-g);
/// gate and up rows are `shape.inputStride` apart (e.g. the two halves of
/// one gate|up GEMM output: up = gate + ffnDim).
Status swiGlu(const RowShape &shape, const float *gate, const float *up,
              float *out, Stream stream);
Status swiGlu(const RowShape &shape, const float *gate, const float *up,
              uint16_t *out, Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_SWIGLU_H
