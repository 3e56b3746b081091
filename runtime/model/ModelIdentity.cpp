//===- ModelIdentity.cpp - The name of a model's weights for cache keys ---===//

#include "runtime/model/ModelIdentity.h"

#include "runtime/model/Gguf.h"

#include "llvm/Support/Path.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

namespace spanc::model {

std::string modelIdentity(const GgufFile &file) {
  XXH3_state_t *state = XXH3_createState();
  XXH3_128bits_reset(state);
  uint64_t size = file.fileSize();
  XXH3_128bits_update(state, &size, sizeof(size));
  for (const GgufTensor &tensor : file.tensors()) {
    XXH3_128bits_update(state, tensor.name.data(), tensor.name.size());
    XXH3_128bits_update(state, tensor.data,
                        std::min<uint64_t>(tensor.numBytes, 256));
  }
  XXH128_hash_t digest = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(digest.high64),
                static_cast<unsigned long long>(digest.low64));
  llvm::Expected<llvm::StringRef> architecture =
      file.getString("general.architecture", "");
  std::string name = architecture ? architecture->str() : "";
  if (!architecture)
    llvm::consumeError(architecture.takeError());
  return name + ":" + llvm::sys::path::filename(file.name()).str() + ":" + hex;
}

} // namespace spanc::model
