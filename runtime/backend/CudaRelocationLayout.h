//===- CudaRelocationLayout.h - A CIDRA plan packed for one launch a batch ===//
//
// The CUDA backend runs each batch of a RelocationPlan (duplicates, ReRoPE
// moves; runtime/kv/RelocationPlanner.h) as one kernel launch: the batch's
// ops are independent by construction, so every (op, layer, KV head) of it
// runs in parallel, and batches run in order on one stream. This is the
// host half: the plan's ops flattened into source, destination and delta
// arrays with one range per batch, uploaded in one copy. A delta of 0 is a
// copy; source = destination is a rotation in place. Plain C++, tested on
// machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDARELOCATIONLAYOUT_H
#define SPANC_RUNTIME_BACKEND_CUDARELOCATIONLAYOUT_H

#include "runtime/kv/RelocationPlanner.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

struct CudaRelocationLayout {
  /// Per op, batches back to back: [sources | destinations | deltas], each
  /// numOps() long, in `packed` (deltas fit int32: positions are bounded by
  /// the context, runtime/kernels/Limits.h).
  std::vector<int32_t> packed;
  /// Batch b's ops are [batchOffsets[b], batchOffsets[b + 1]).
  std::vector<int32_t> batchOffsets;

  int64_t numOps() const {
    return batchOffsets.empty() ? 0 : batchOffsets.back();
  }
  int numBatches() const {
    return batchOffsets.empty() ? 0 : int(batchOffsets.size()) - 1;
  }
  const int32_t *sources() const { return packed.data(); }
  const int32_t *destinations() const { return packed.data() + numOps(); }
  const int32_t *deltas() const { return packed.data() + 2 * numOps(); }
  /// Tokens moved (ops times the block size): the throughput's numerator.
  int64_t tokens(int blockSize) const { return numOps() * blockSize; }
};

/// Flattens `batches` (a plan's, or one copy-on-write op) into `layout`,
/// dropping empty batches. Fails, before anything runs, on a block outside
/// [0, numBlocks), a delta that does not fit int32, or a batch in which an
/// op writes a block another op of the batch reads or writes (CIDRA never
/// plans one; running it in one launch would race).
llvm::Error buildCudaRelocationLayout(
    llvm::ArrayRef<llvm::SmallVector<kv::RelocationOp, 8>> batches,
    int64_t numBlocks, CudaRelocationLayout &layout);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDARELOCATIONLAYOUT_H
