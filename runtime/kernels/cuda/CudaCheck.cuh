//===- CudaCheck.cuh - CUDA and cuBLASLt error codes as Status ------------===//
//
// Internal to the .cu files: every runtime or library call is checked, and
// a failure becomes a Status naming the call, the error's name and its
// text. Launches are checked with cudaGetLastError right after the launch
// (a bad configuration fails there; a fault inside the kernel surfaces at
// the next synchronize()).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_CUDACHECK_CUH
#define SPANC_RUNTIME_KERNELS_CUDA_CUDACHECK_CUH

#include "runtime/kernels/cuda/Status.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace spanc::cuda {

/// Success, or "CALL: cudaErrorX: text".
Status cudaStatus(cudaError_t error, const char *call);
/// Success, or "CALL: CUBLAS_STATUS_X".
Status blasStatus(cublasStatus_t status, const char *call);
/// The launch of `kernel` just queued: cudaGetLastError as a Status.
Status launchStatus(const char *kernel);
/// A failure for arguments a kernel rejects before launching.
Status invalidArgument(const char *function, const std::string &why);

} // namespace spanc::cuda

/// Checks one CUDA runtime call, returning its failure from the caller.
#define SPANC_CUDA_CALL(call)                                                  \
  SPANC_CUDA_TRY(::spanc::cuda::cudaStatus((call), #call))
/// Checks one cuBLAS(Lt) call.
#define SPANC_BLAS_CALL(call)                                                  \
  SPANC_CUDA_TRY(::spanc::cuda::blasStatus((call), #call))

#endif // SPANC_RUNTIME_KERNELS_CUDA_CUDACHECK_CUH
