//===- RmsNorm.h - RMSNorm on CUDA devices --------------------------------===//
//
// The first kernel of the CUDA backend, and the probe the rest of it builds
// on: whether a device exists, and the row-wise RMSNorm that opens every
// decoder layer. The CPU kernel is the reference it is tested against.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H
#define SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H

#include <cstddef>
#include <string>

namespace spanc::cuda {

/// Number of usable CUDA devices; 0 when there is no driver or no device.
int deviceCount();

/// y[r][c] = x[r][c] / sqrt(mean(x[r]^2) + epsilon) * weight[c] for `rows`
/// rows of `cols` floats, on host buffers copied to and from device 0.
/// Returns an empty string on success, else the CUDA error text.
std::string rmsNormOnDevice(const float *x, const float *weight, float *y,
                            size_t rows, size_t cols, float epsilon);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_RMSNORM_H
