//===- KvCacheCapacity.h - --kv-cache as tokens, for run and serve --------===//
//
// `run` and `serve` size their KV cache with --kv-cache: tokens, or memory
// (512MiB, 2GiB) converted at the model's K/V bytes per block; the
// conversion is written once here, over kv::parseKvCacheCapacity (units,
// overflow checks, errors naming the option and the text).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_KVCACHECAPACITY_H
#define SPANC_TOOLS_SPANC_KVCACHECAPACITY_H

#include "runtime/model/Model.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace spanc::cli {

/// The tokens `capacity` holds in whole blocks of `blockSize` tokens of
/// `model`'s K and V (every layer, at the storage precision).
llvm::Expected<int64_t> kvCacheTokens(llvm::StringRef capacity,
                                      const model::Model &model,
                                      unsigned blockSize);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_KVCACHECAPACITY_H
