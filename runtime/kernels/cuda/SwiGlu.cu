//===- SwiGlu.cu - The gated feed-forward activation on CUDA devices ------===//

#include "runtime/kernels/cuda/SwiGlu.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

template <typename Output>
__global__ void swiGluKernel(RowShape shape, const float *gate, const float *up,
                             Output *out) {
  const int64_t count = shape.rows * shape.cols;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < count; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = index / shape.cols, col = index % shape.cols;
    const int64_t input = row * shape.inputStride + col;
    storeActivation(out + row * shape.outputStride + col,
                    swiGluElement(gate[input], up[input]));
  }
}

template <typename Output>
Status launchSwiGlu(const RowShape &shape, const float *gate, const float *up,
                    Output *out, Stream stream) {
  const LaunchShape launch = elementwiseLaunch(shape.rows * shape.cols);
  if (launch.blocks == 0)
    return Status::success();
  swiGluKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      shape, gate, up, out);
  return launchStatus("swiGluKernel");
}

} // namespace

Status swiGlu(const RowShape &shape, const float *gate, const float *up,
              float *out, Stream stream) {
  return launchSwiGlu(shape, gate, up, out, stream);
}

Status swiGlu(const RowShape &shape, const float *gate, const float *up,
              uint16_t *out, Stream stream) {
  return launchSwiGlu(shape, gate, up, out, stream);
}

} // namespace spanc::cuda
