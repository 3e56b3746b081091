//===- Relocation.h - ReRoPE relocation of KV blocks on CUDA devices ------===//
//
// backend::RelocationExecutor on the GPU: one CIDRA batch (RelocationBatch.h)
// in ONE launch over every op, layer and KV head; K turned by each op's delta
// in f32 from the stored f16/f32 values and rounded back (the CPU's
// arithmetic, RelocationMath.h), V copied for a duplicate. A plan's batches
// run in order on one stream, so a later batch sees an earlier one's
// writes.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_RELOCATION_H
#define SPANC_RUNTIME_KERNELS_CUDA_RELOCATION_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/RelocationBatch.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstddef>
#include <vector>

namespace spanc::cuda {

/// The device copy of the batches' records and tables; grows, never
/// shrinks.
class RelocationWorkspace {
public:
  RelocationBatch &batch() { return batch_; }
  DeviceBuffer &buffer() { return buffer_; }
  std::vector<char> &staging() { return staging_; }

private:
  RelocationBatch batch_;
  DeviceBuffer buffer_;
  std::vector<char> staging_;
};

/// Runs one batch (independent ops, host memory) on `stream`. Fails before
/// any launch when buildRelocationBatch does. No ops: nothing runs.
Status relocateBlocks(const KvPoolView &pool,
                      const RelocationRotation &rotation,
                      const RelocationOp *ops, size_t numOps,
                      RelocationWorkspace &workspace, Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_RELOCATION_H
