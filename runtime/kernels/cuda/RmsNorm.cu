//===- RmsNorm.cu - RMSNorm on CUDA devices -------------------------------===//

#include "runtime/kernels/cuda/RmsNorm.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/Launch.h"
#include "runtime/kernels/cuda/Reduce.cuh"

namespace spanc::cuda {
namespace {

// One block per row: a strided sum of squares, a block reduction, then the
// scaled write.
template <typename Output>
__global__ void rmsNormKernel(RowShape shape, const float *__restrict__ x,
                              const float *__restrict__ weight, float epsilon,
                              Output *out) {
  __shared__ float scratch[32];
  const float *row = x + blockIdx.x * shape.inputStride;
  Output *outRow = out + blockIdx.x * shape.outputStride;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < shape.cols; c += blockDim.x)
    sum += row[c] * row[c];
  const float scale = rmsNormScale(blockSum(sum, scratch), shape.cols, epsilon);
  // `out` may alias `x`: every read of the row happened before blockSum's
  // barriers, and each thread then reads only the columns it writes.
  for (int64_t c = threadIdx.x; c < shape.cols; c += blockDim.x)
    storeActivation(outRow + c, rmsNormElement(row[c], scale, weight[c]));
}

template <typename Output>
Status launchRmsNorm(const RowShape &shape, const float *x, const float *weight,
                     float epsilon, Output *out, Stream stream) {
  const LaunchShape launch = rowLaunch(shape.rows, shape.cols);
  if (launch.blocks == 0)
    return Status::success();
  rmsNormKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      shape, x, weight, epsilon, out);
  return launchStatus("rmsNormKernel");
}

} // namespace

Status rmsNorm(const RowShape &shape, const float *x, const float *weight,
               float epsilon, float *out, Stream stream) {
  return launchRmsNorm(shape, x, weight, epsilon, out, stream);
}

Status rmsNorm(const RowShape &shape, const float *x, const float *weight,
               float epsilon, uint16_t *out, Stream stream) {
  return launchRmsNorm(shape, x, weight, epsilon, out, stream);
}

std::string rmsNormOnDevice(const float *x, const float *weight, float *y,
                            size_t rows, size_t cols, float epsilon) {
  const size_t bytes = rows * cols * sizeof(float);
  DeviceBuffer deviceX, deviceWeight, deviceY;
  const RowShape shape{int64_t(rows), int64_t(cols), int64_t(cols),
                       int64_t(cols)};
  auto run = [&]() -> Status {
    SPANC_CUDA_TRY(deviceX.reserve(bytes));
    SPANC_CUDA_TRY(deviceY.reserve(bytes));
    SPANC_CUDA_TRY(deviceWeight.reserve(cols * sizeof(float)));
    SPANC_CUDA_TRY(copyToDevice(deviceX.data(), x, bytes, nullptr));
    SPANC_CUDA_TRY(copyToDevice(deviceWeight.data(), weight,
                                cols * sizeof(float), nullptr));
    SPANC_CUDA_TRY(rmsNorm(shape, deviceX.as<float>(), deviceWeight.as<float>(),
                           epsilon, deviceY.as<float>(), nullptr));
    return copyToHost(y, deviceY.data(), bytes, nullptr);
  };
  return run().message();
}

} // namespace spanc::cuda
