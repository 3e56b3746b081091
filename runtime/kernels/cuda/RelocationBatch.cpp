//===- RelocationBatch.cpp - A CIDRA batch laid out for one launch --------===//

#include "runtime/kernels/cuda/RelocationBatch.h"

#include <cmath>
#include <string>
#include <unordered_set>

namespace spanc::cuda {

namespace {

Status batchError(const std::string &message) {
  return Status::failure("relocation batch: " + message);
}

} // namespace

int64_t relocationGridSize(const KvPoolView &pool, size_t numOps) {
  return int64_t(numOps) * pool.numLayers * pool.numKvHeads;
}

Status buildRelocationBatch(const KvPoolView &pool,
                            const RelocationRotation &rotation,
                            const RelocationOp *ops, size_t numOps,
                            RelocationBatch &batch) {
  batch.records.clear();
  batch.tables.clear();
  batch.rotaryDim = rotation.rotaryDim;
  if (rotation.rotaryDim < 0 || rotation.rotaryDim % 2 != 0 ||
      rotation.rotaryDim > pool.headDim)
    return batchError("rotary dim " + std::to_string(rotation.rotaryDim) +
                      " with head dim " + std::to_string(pool.headDim));
  if (rotation.rotaryDim > 0 && !rotation.frequencies)
    return batchError("no frequencies");
  std::unordered_set<uint32_t> written;
  for (size_t index = 0; index < numOps; ++index) {
    const RelocationOp &op = ops[index];
    if (int64_t(op.source) >= pool.numBlocks ||
        int64_t(op.destination) >= pool.numBlocks)
      return batchError(
          "op " + std::to_string(index) + " (" + std::to_string(op.source) +
          " -> " + std::to_string(op.destination) + ") outside a pool of " +
          std::to_string(pool.numBlocks) + " blocks");
    if (!written.insert(op.destination).second)
      return batchError("two ops write block " +
                        std::to_string(op.destination));
  }
  // A duplicate's source must not be another op's destination: the ops of
  // a batch run concurrently.
  for (size_t index = 0; index < numOps; ++index)
    if (ops[index].source != ops[index].destination &&
        written.count(ops[index].source))
      return batchError("op " + std::to_string(index) + " reads block " +
                        std::to_string(ops[index].source) +
                        ", which the batch writes");

  // One table per distinct nonzero delta, in double as the CPU fills its
  // tables (cpu::relocateBlocks), then rounded to f32.
  const int half = rotation.rotaryDim / 2;
  std::vector<int64_t> deltas;
  batch.records.reserve(numOps);
  for (size_t index = 0; index < numOps; ++index) {
    const RelocationOp &op = ops[index];
    RelocationRecord record;
    record.source = op.source;
    record.destination = op.destination;
    if (op.delta != 0) {
      size_t found = 0;
      while (found < deltas.size() && deltas[found] != op.delta)
        ++found;
      if (found == deltas.size()) {
        deltas.push_back(op.delta);
        for (int pair = 0; pair < half; ++pair)
          batch.tables.push_back(
              float(std::cos(double(op.delta) * rotation.frequencies[pair])));
        for (int pair = 0; pair < half; ++pair)
          batch.tables.push_back(
              float(std::sin(double(op.delta) * rotation.frequencies[pair])));
      }
      record.table = int32_t(found);
    }
    batch.records.push_back(record);
  }
  return Status::success();
}

} // namespace spanc::cuda
