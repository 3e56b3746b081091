//===- CudaRelocationLayout.cpp - A CIDRA plan packed for one launch a batch //

#include "runtime/backend/CudaRelocationLayout.h"

#include "llvm/ADT/DenseMap.h"

#include <limits>

namespace spanc::backend {

namespace {

llvm::Error relocationError(size_t batch, size_t op, const std::string &what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "relocation batch %zu, op %zu: %s", batch, op,
                                 what.c_str());
}

} // namespace

llvm::Error buildCudaRelocationLayout(
    llvm::ArrayRef<llvm::SmallVector<kv::RelocationOp, 8>> batches,
    int64_t numBlocks, CudaRelocationLayout &layout) {
  layout.packed.clear();
  layout.batchOffsets.assign(1, 0);
  std::vector<int32_t> sources, destinations, deltas;
  // Per block of the batch: how it is used (1: read, 2: written).
  llvm::DenseMap<uint32_t, unsigned> uses;
  for (size_t batch = 0; batch < batches.size(); ++batch) {
    if (batches[batch].empty())
      continue;
    uses.clear();
    for (size_t index = 0; index < batches[batch].size(); ++index) {
      const kv::RelocationOp &op = batches[batch][index];
      if (int64_t(op.source) >= numBlocks ||
          int64_t(op.destination) >= numBlocks)
        return relocationError(
            batch, index,
            "block " + std::to_string(std::max(op.source, op.destination)) +
                " outside the pool's " + std::to_string(numBlocks) + " blocks");
      if (op.delta < std::numeric_limits<int32_t>::min() ||
          op.delta > std::numeric_limits<int32_t>::max())
        return relocationError(batch, index,
                               "delta " + std::to_string(op.delta) +
                                   " does not fit 32 bits");
      // An in-place op owns its block; otherwise a destination may be
      // nobody else's source or destination.
      unsigned &sourceUse = uses[op.source];
      if (op.source == op.destination) {
        if (sourceUse != 0)
          return relocationError(batch, index,
                                 "block " + std::to_string(op.source) +
                                     " is used by another op of the batch");
        sourceUse = 3;
      } else {
        if (sourceUse & 2)
          return relocationError(batch, index,
                                 "reads block " + std::to_string(op.source) +
                                     " that the batch writes");
        sourceUse |= 1;
        unsigned &destinationUse = uses[op.destination];
        if (destinationUse != 0)
          return relocationError(batch, index,
                                 "writes block " +
                                     std::to_string(op.destination) +
                                     " that the batch also uses");
        destinationUse = 2;
      }
      sources.push_back(int32_t(op.source));
      destinations.push_back(int32_t(op.destination));
      deltas.push_back(int32_t(op.delta));
    }
    layout.batchOffsets.push_back(int32_t(sources.size()));
  }
  layout.packed.reserve(3 * sources.size());
  layout.packed.insert(layout.packed.end(), sources.begin(), sources.end());
  layout.packed.insert(layout.packed.end(), destinations.begin(),
                       destinations.end());
  layout.packed.insert(layout.packed.end(), deltas.begin(), deltas.end());
  return llvm::Error::success();
}

} // namespace spanc::backend
