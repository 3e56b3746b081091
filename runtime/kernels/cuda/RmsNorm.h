//===- RmsNorm.h - RMSNorm on CUDA devices --------------------------------===//
//
// The row-wise RMSNorm that opens every decoder layer and the output head:
// f32 rows in (the residual stream), f32 or bf16 rows out (bf16 feeds the
// next GEMM directly). One block of threads per row. The CPU kernel
// (cpu::rmsNorm) is the reference it is tested against.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H
#define SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstddef>
#include <string>

namespace spanc::cuda {

/// out[r][c] = x[r][c] / sqrt(mean_c(x[r]^2) + epsilon) * weight[c], device
/// memory, queued on `stream`. `out` may alias `x` when the strides match.
Status rmsNorm(const RowShape &shape, const float *x, const float *weight,
               float epsilon, float *out, Stream stream);
/// The same, rounding the output to bf16 (nearest even).
Status rmsNorm(const RowShape &shape, const float *x, const float *weight,
               float epsilon, uint16_t *out, Stream stream);

/// rmsNorm on host buffers copied to and from device 0 (tests). Returns an
/// empty string on success, else the CUDA error text.
std::string rmsNormOnDevice(const float *x, const float *weight, float *y,
                            size_t rows, size_t cols, float epsilon);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H
