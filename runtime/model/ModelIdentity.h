//===- ModelIdentity.h - The name of a model's weights for cache keys -----===//
//
// Every KV block hash depends on the model (docs/ARCHITECTURE.md, "The plan"),
// so two models never share cache entries. The identity samples the tensor data
// (names and the first bytes of every tensor, plus the file size) rather than
// hashing the whole file: cheap at start-up, and any re-quantization or
// fine-tune changes it. `spanc run` and `spanc compile --emit=plan` use this
// one function, so printed plans show the hashes the runtime looks up.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_MODELIDENTITY_H
#define SPANC_RUNTIME_MODEL_MODELIDENTITY_H

#include <string>

namespace spanc::model {

class GgufFile;

/// "ARCHITECTURE:FILENAME:XXH3-128 of the sampled tensor data".
std::string modelIdentity(const GgufFile &file);

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_MODELIDENTITY_H
