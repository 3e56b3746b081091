//===- Rows.cu - Row gathers and conversions on CUDA devices --------------===//

#include "runtime/kernels/cuda/Rows.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

// out[r] = x[rowIndices[r]] (rowIndices null: row r), converted to Output.
template <typename Output>
__global__ void copyRowsKernel(RowShape shape, const float *x,
                               const int32_t *rowIndices, Output *out) {
  const int64_t count = shape.rows * shape.cols;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < count; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = index / shape.cols, col = index % shape.cols;
    const int64_t source = rowIndices ? rowIndices[row] : row;
    storeActivation(out + row * shape.outputStride + col,
                    x[source * shape.inputStride + col]);
  }
}

template <typename Output>
Status launchCopyRows(const RowShape &shape, const float *x,
                      const int32_t *rowIndices, Output *out, Stream stream) {
  const LaunchShape launch = elementwiseLaunch(shape.rows * shape.cols);
  if (launch.blocks == 0)
    return Status::success();
  copyRowsKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      shape, x, rowIndices, out);
  return launchStatus("copyRowsKernel");
}

} // namespace

Status gatherRows(const RowShape &shape, const float *x,
                  const int32_t *rowIndices, float *out, Stream stream) {
  return launchCopyRows(shape, x, rowIndices, out, stream);
}

Status convertToBf16(const RowShape &shape, const float *x, uint16_t *out,
                     Stream stream) {
  return launchCopyRows<uint16_t>(shape, x, nullptr, out, stream);
}

} // namespace spanc::cuda
