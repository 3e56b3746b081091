//===- AddRows.cu - Residual and bias additions on CUDA devices -----------===//

#include "runtime/kernels/cuda/AddRows.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

// Grid-stride over rows x cols; `bias` set: y's row stride is 0.
__global__ void addRowsKernel(RowShape shape, float *x, const float *y) {
  const int64_t count = shape.rows * shape.cols;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < count; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = index / shape.cols, col = index % shape.cols;
    x[row * shape.outputStride + col] += y[row * shape.inputStride + col];
  }
}

Status launchAddRows(const RowShape &shape, float *x, const float *y,
                     Stream stream) {
  const LaunchShape launch = elementwiseLaunch(shape.rows * shape.cols);
  if (launch.blocks == 0)
    return Status::success();
  addRowsKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(shape,
                                                                        x, y);
  return launchStatus("addRowsKernel");
}

} // namespace

Status addInPlace(const RowShape &shape, float *x, const float *y,
                  Stream stream) {
  return launchAddRows(shape, x, y, stream);
}

Status addBias(const RowShape &shape, float *x, const float *bias,
               Stream stream) {
  RowShape broadcast = shape;
  broadcast.inputStride = 0;
  return launchAddRows(broadcast, x, bias, stream);
}

} // namespace spanc::cuda
