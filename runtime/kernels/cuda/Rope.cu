//===- Rope.cu - Rotary position embedding on CUDA devices ----------------===//

#include "runtime/kernels/cuda/Rope.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

// One thread per (row, head, pair): pairs are independent, so each thread
// reads and writes only its own two elements.
__global__ void ropeKernel(RopeShape shape, RopeTableView table,
                           const int32_t *positions, float *x) {
  const int half = table.rotaryDim / 2;
  const bool neox = table.order == RopeOrder::NeoX;
  const int64_t count = shape.rows * shape.numHeads * half;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < count; index += int64_t(gridDim.x) * blockDim.x) {
    const int pair = int(index % half);
    const int64_t head = index / half % shape.numHeads;
    const int64_t row = index / half / shape.numHeads;
    const float *cosSin =
        table.cosSin + int64_t(positions[row]) * table.rotaryDim;
    float *vector = x + row * shape.rowStride + head * table.headDim;
    int first, second;
    ropePairDims(neox, table.rotaryDim, pair, first, second);
    rotatePair(vector[first], vector[second], cosSin[pair], cosSin[half + pair],
               vector[first], vector[second]);
  }
}

} // namespace

Status applyRope(const RopeShape &shape, const RopeTableView &table,
                 const int32_t *positions, float *x, Stream stream) {
  if (table.rotaryDim % 2 != 0 || table.rotaryDim > table.headDim)
    return invalidArgument(
        "applyRope", "rotary dim " + std::to_string(table.rotaryDim) +
                         " with head dim " + std::to_string(table.headDim));
  const LaunchShape launch =
      elementwiseLaunch(shape.rows * shape.numHeads * (table.rotaryDim / 2));
  if (launch.blocks == 0)
    return Status::success();
  ropeKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      shape, table, positions, x);
  return launchStatus("ropeKernel");
}

} // namespace spanc::cuda
