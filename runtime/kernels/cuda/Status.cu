//===- Status.cu - CUDA and cuBLASLt error codes as Status ----------------===//

#include "runtime/kernels/cuda/CublasLt.cuh"
#include "runtime/kernels/cuda/CudaCheck.cuh"

namespace spanc::cuda {

Status cudaStatus(cudaError_t error, const char *call) {
  if (error == cudaSuccess)
    return Status::success();
  return Status::failure(std::string(call) + ": " + cudaGetErrorName(error) +
                         ": " + cudaGetErrorString(error));
}

Status blasStatus(cublasStatus_t status, const char *call) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return Status::success();
  const CublasLtApi *api = cublasLtIfLoaded();
  if (!api)
    return Status::failure(std::string(call) + ": cuBLAS status " +
                           std::to_string(int(status)));
  return Status::failure(std::string(call) + ": " +
                         api->cublasLtGetStatusName(status) + ": " +
                         api->cublasLtGetStatusString(status));
}

Status launchStatus(const char *kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess)
    return Status::success();
  return cudaStatus(error, (std::string("launching ") + kernel).c_str());
}

Status invalidArgument(const char *function, const std::string &why) {
  return Status::failure(std::string(function) + ": " + why);
}

} // namespace spanc::cuda
