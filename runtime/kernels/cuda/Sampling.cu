//===- Sampling.cu - Greedy tokens and logits off the device --------------===//

#include "runtime/kernels/cuda/Sampling.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/ElementwiseMath.h"

namespace spanc::cuda {
namespace {

constexpr int kArgmaxThreads = 256;

// One block per row: each thread's best over a strided slice, then a tree
// over the block with the same tie rule, so the result is the first
// maximum whatever the thread count.
__global__ void argmaxKernel(const float *logits, int64_t vocab,
                             int64_t rowStride, int32_t *tokens) {
  __shared__ float bestValues[kArgmaxThreads];
  __shared__ int64_t bestIndices[kArgmaxThreads];
  const float *row = logits + blockIdx.x * rowStride;
  float best = __int_as_float(0x7fffffff); // NaN: "none yet"
  int64_t bestIndex = vocab;
  for (int64_t index = threadIdx.x; index < vocab; index += blockDim.x)
    if (argmaxBetter(row[index], index, best, bestIndex)) {
      best = row[index];
      bestIndex = index;
    }
  bestValues[threadIdx.x] = best;
  bestIndices[threadIdx.x] = bestIndex;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const int other = threadIdx.x + stride;
      if (bestIndices[other] < vocab &&
          (bestIndices[threadIdx.x] >= vocab ||
           argmaxBetter(bestValues[other], bestIndices[other],
                        bestValues[threadIdx.x], bestIndices[threadIdx.x]))) {
        bestValues[threadIdx.x] = bestValues[other];
        bestIndices[threadIdx.x] = bestIndices[other];
      }
    }
    __syncthreads();
  }
  // An all-NaN row gives 0, as Sampler::argmax does.
  if (threadIdx.x == 0)
    tokens[blockIdx.x] = int32_t(bestIndices[0] < vocab ? bestIndices[0] : 0);
}

} // namespace

Status argmaxRows(const float *logits, int64_t rows, int64_t vocab,
                  int64_t rowStride, int32_t *tokens, Stream stream) {
  if (rows <= 0)
    return Status::success();
  if (vocab <= 0 || rowStride < vocab)
    return invalidArgument("argmaxRows",
                           "vocabulary of " + std::to_string(vocab) +
                               " with row stride " + std::to_string(rowStride));
  argmaxKernel<<<unsigned(rows), kArgmaxThreads, 0, stream>>>(
      logits, vocab, rowStride, tokens);
  return launchStatus("argmaxKernel");
}

Status greedyTokens(const float *logits, int64_t rows, int64_t vocab,
                    int64_t rowStride, DeviceBuffer &scratch,
                    int32_t *hostTokens, Stream stream) {
  if (rows <= 0)
    return Status::success();
  SPANC_CUDA_TRY(scratch.reserve(size_t(rows) * sizeof(int32_t)));
  SPANC_CUDA_TRY(argmaxRows(logits, rows, vocab, rowStride,
                            scratch.as<int32_t>(), stream));
  return copyToHost(hostTokens, scratch.data(), size_t(rows) * sizeof(int32_t),
                    stream);
}

Status copyLogitsToHost(const float *logits, int64_t rows, int64_t vocab,
                        int64_t rowStride, float *hostLogits, Stream stream) {
  if (rows <= 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaMemcpy2DAsync(hostLogits, size_t(vocab) * sizeof(float),
                                    logits, size_t(rowStride) * sizeof(float),
                                    size_t(vocab) * sizeof(float), size_t(rows),
                                    cudaMemcpyDeviceToHost, stream));
  SPANC_CUDA_CALL(cudaStreamSynchronize(stream));
  return Status::success();
}

} // namespace spanc::cuda
