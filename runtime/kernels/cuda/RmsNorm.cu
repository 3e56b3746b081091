//===- RmsNorm.cu - RMSNorm on CUDA devices -------------------------------===//

#include "runtime/kernels/cuda/RmsNorm.h"

#include <cuda_runtime.h>

namespace spanc::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: a strided sum of squares, a shared-memory tree
// reduction, then the scaled write.
__global__ void rmsNormKernel(const float *__restrict__ x,
                              const float *__restrict__ weight,
                              float *__restrict__ y, size_t cols,
                              float epsilon) {
  __shared__ float partial[kThreads];
  const float *row = x + blockIdx.x * cols;
  float *out = y + blockIdx.x * cols;
  float sum = 0.0f;
  for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
    sum += row[c] * row[c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float scale = rsqrtf(partial[0] / cols + epsilon);
  for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[c] = row[c] * scale * weight[c];
}

std::string errorText(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

} // namespace

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess)
    return 0;
  return count;
}

std::string rmsNormOnDevice(const float *x, const float *weight, float *y,
                            size_t rows, size_t cols, float epsilon) {
  float *deviceX = nullptr, *deviceWeight = nullptr, *deviceY = nullptr;
  const size_t bytes = rows * cols * sizeof(float);
  cudaError_t error = cudaMalloc(&deviceX, bytes);
  if (error == cudaSuccess)
    error = cudaMalloc(&deviceY, bytes);
  if (error == cudaSuccess)
    error = cudaMalloc(&deviceWeight, cols * sizeof(float));
  if (error == cudaSuccess)
    error = cudaMemcpy(deviceX, x, bytes, cudaMemcpyHostToDevice);
  if (error == cudaSuccess)
    error = cudaMemcpy(deviceWeight, weight, cols * sizeof(float),
                       cudaMemcpyHostToDevice);
  if (error == cudaSuccess) {
    rmsNormKernel<<<rows, kThreads>>>(deviceX, deviceWeight, deviceY, cols,
                                      epsilon);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess)
    error = cudaMemcpy(y, deviceY, bytes, cudaMemcpyDeviceToHost);
  cudaFree(deviceX);
  cudaFree(deviceY);
  cudaFree(deviceWeight);
  return error == cudaSuccess ? std::string() : errorText(error);
}

} // namespace spanc::cuda
