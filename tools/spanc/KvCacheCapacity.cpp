//===- KvCacheCapacity.cpp - --kv-cache as tokens, for run and serve ------===//

#include "tools/spanc/KvCacheCapacity.h"

#include "runtime/kernels/cpu/Half.h"
#include "runtime/kv/BlockPool.h"

namespace spanc::cli {

llvm::Expected<int64_t> kvCacheTokens(llvm::StringRef capacity,
                                      const model::Model &model,
                                      unsigned blockSize) {
  const model::ModelConfig &config = model.config();
  const cpu::KvPrecision precision =
      model.halfPrecisionKv() ? cpu::KvPrecision::F16 : cpu::KvPrecision::F32;
  const uint64_t bytesPerBlock = uint64_t(2) * config.numLayers *
                                 config.numKvHeads * config.headDim *
                                 cpu::kvElementBytes(precision) * blockSize;
  auto blocks = kv::parseKvCacheCapacity(capacity, blockSize, bytesPerBlock);
  if (!blocks)
    return blocks.takeError();
  return int64_t(*blocks) * int64_t(blockSize);
}

} // namespace spanc::cli
