//===- Embedding.cu - Token embedding lookup on CUDA devices --------------===//

#include "runtime/kernels/cuda/Embedding.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

__global__ void embeddingKernel(EmbeddingTable table, const int32_t *ids,
                                int64_t count, float *out,
                                int64_t outputStride) {
  const int64_t total = count * table.dim;
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < total; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = index / table.dim, col = index % table.dim;
    const int64_t id = ids[token];
    float value = 0.0f;
    if (id >= 0 && id < table.numRows) {
      const int64_t offset = id * table.rowStride + col;
      value = table.bf16Rows ? bf16ToFloat(table.bf16Rows[offset])
                             : table.f32Rows[offset];
    }
    out[token * outputStride + col] = value;
  }
}

} // namespace

Status embeddingLookup(const EmbeddingTable &table, const int32_t *ids,
                       int64_t count, float *out, int64_t outputStride,
                       Stream stream) {
  if ((table.bf16Rows == nullptr) == (table.f32Rows == nullptr))
    return invalidArgument("embeddingLookup",
                           "exactly one of bf16Rows and f32Rows must be set");
  const LaunchShape launch = elementwiseLaunch(count * table.dim);
  if (launch.blocks == 0)
    return Status::success();
  embeddingKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      table, ids, count, out, outputStride);
  return launchStatus("embeddingKernel");
}

} // namespace spanc::cuda
