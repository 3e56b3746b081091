//===- Relocation.cu - ReRoPE relocation of KV blocks on CUDA devices -----===//

#include "runtime/kernels/cuda/Relocation.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/RelocationMath.h"

#include <cstring>

namespace spanc::cuda {
namespace {

constexpr int kRelocationThreads = 128;

// One block per (op, layer, KV head), layer-major over ops so consecutive
// blocks walk consecutive blocks of one layer's array.
template <typename Element>
__global__ void __launch_bounds__(kRelocationThreads)
    relocateKernel(KvPoolView pool, RopeOrder order, int rotaryDim,
                   const RelocationRecord *records, int64_t numOps,
                   const float *tables) {
  const int64_t item = blockIdx.x;
  const int head = int(item % pool.numKvHeads);
  const int64_t op = item / pool.numKvHeads % numOps;
  const int layer = int(item / pool.numKvHeads / numOps);
  const RelocationRecord record = records[op];
  const int64_t units =
      relocationUnits(pool.headDim, rotaryDim, pool.blockSize);
  for (int64_t unit = threadIdx.x; unit < units; unit += blockDim.x)
    relocateUnit<Element>(pool, order, rotaryDim, record, tables, layer, head,
                          unit);
}

} // namespace

Status relocateBlocks(const KvPoolView &pool,
                      const RelocationRotation &rotation,
                      const RelocationOp *ops, size_t numOps,
                      RelocationWorkspace &workspace, Stream stream) {
  RelocationBatch &batch = workspace.batch();
  SPANC_CUDA_TRY(buildRelocationBatch(pool, rotation, ops, numOps, batch));
  const int64_t grid = relocationGridSize(pool, numOps);
  if (grid == 0)
    return Status::success();
  // Records then tables, one copy.
  const size_t recordBytes = batch.records.size() * sizeof(RelocationRecord);
  const size_t tableBytes = batch.tables.size() * sizeof(float);
  std::vector<char> &staging = workspace.staging();
  staging.resize(recordBytes + tableBytes);
  std::memcpy(staging.data(), batch.records.data(), recordBytes);
  if (tableBytes)
    std::memcpy(staging.data() + recordBytes, batch.tables.data(), tableBytes);
  DeviceBuffer &buffer = workspace.buffer();
  SPANC_CUDA_TRY(buffer.reserve(staging.size()));
  SPANC_CUDA_TRY(
      copyToDevice(buffer.data(), staging.data(), staging.size(), stream));
  const RelocationRecord *records = buffer.as<RelocationRecord>();
  const float *tables = reinterpret_cast<const float *>(
      static_cast<const char *>(buffer.data()) + recordBytes);
  if (pool.precision == KvPrecision::F16)
    relocateKernel<uint16_t><<<unsigned(grid), kRelocationThreads, 0, stream>>>(
        pool, rotation.order, rotation.rotaryDim, records, int64_t(numOps),
        tables);
  else
    relocateKernel<float><<<unsigned(grid), kRelocationThreads, 0, stream>>>(
        pool, rotation.order, rotation.rotaryDim, records, int64_t(numOps),
        tables);
  return launchStatus("relocateKernel");
}

} // namespace spanc::cuda
