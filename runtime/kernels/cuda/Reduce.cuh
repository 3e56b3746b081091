//===- Reduce.cuh - Block-wide sums and maxima ----------------------------===//
//
// Internal to the .cu files: reductions over one thread block of any warp
// multiple up to 1024 threads (warp shuffles, then one value per warp in
// shared memory). Every thread gets the result.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_REDUCE_CUH
#define SPANC_RUNTIME_KERNELS_CUDA_REDUCE_CUH

namespace spanc::cuda {

__device__ __forceinline__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

/// The sum of `value` over the block; `scratch` holds 32 floats. Ends with
/// a barrier, so `scratch` may be reused right after.
__device__ __forceinline__ float blockSum(float value, float *scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int numWarps = (blockDim.x + 31) / 32;
  value = warpSum(value);
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  float total = 0;
  for (int index = 0; index < numWarps; ++index)
    total += scratch[index];
  __syncthreads();
  return total;
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_REDUCE_CUH
