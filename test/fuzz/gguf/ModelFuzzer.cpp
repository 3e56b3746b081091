//===- ModelFuzzer.cpp - libFuzzer target: GGUF bytes through Model::load -===//
//
// The reader's target (GgufFuzzer.cpp) stops at metadata; this one hands
// the bytes to Model::load, as `spanc run --model` does: configuration,
// weight packing for the GEMMs and the quantized GEMV, the RoPE table, and
// then a three-token prefill and one decode step, so a model that loads
// must also run. The bytes reach the loader through a memfd, the path
// Model::load opens, without touching the disk.
//
// The RoPE table is capped (ModelOptions::maxPositions), since the context
// length a file declares sizes it: what a huge declared context does is
// the loader's range check, not this target's to rediscover on every run.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/SequenceRunner.h"
#include "runtime/model/Model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

using namespace spanc::model;
using spanc::backend::SequenceRunner;

namespace {

/// A memory file holding `size` bytes; closes itself.
class MemoryFile {
public:
  MemoryFile(const uint8_t *data, size_t size)
      : descriptor(memfd_create("fuzz.gguf", MFD_CLOEXEC)) {
    size_t written = 0;
    while (descriptor >= 0 && written < size) {
      ssize_t count = write(descriptor, data + written, size - written);
      if (count <= 0)
        break;
      written += size_t(count);
    }
  }
  ~MemoryFile() {
    if (descriptor >= 0)
      close(descriptor);
  }
  bool valid() const { return descriptor >= 0; }
  std::string path() const {
    return "/proc/self/fd/" + std::to_string(descriptor);
  }

private:
  int descriptor;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MemoryFile file(data, size);
  if (!file.valid())
    return 0;
  ModelOptions options;
  options.maxPositions = 64;
  auto model = Model::load(file.path(), options);
  if (!model) {
    llvm::consumeError(model.takeError());
    return 0;
  }
  auto runner = SequenceRunner::create(**model, /*maxTokens=*/8);
  if (!runner) {
    llvm::consumeError(runner.takeError());
    return 0;
  }
  const int32_t vocabSize = int32_t((*model)->config().vocabSize);
  const int32_t prompt[] = {0, vocabSize / 2, vocabSize - 1};
  auto logits = (*runner)->append(prompt);
  if (!logits) {
    llvm::consumeError(logits.takeError());
    return 0;
  }
  volatile float sink = (*logits)[0];
  const int32_t next = 1 % vocabSize;
  logits = (*runner)->append(llvm::ArrayRef<int32_t>(next));
  if (logits)
    sink = sink + (*logits)[size_t(vocabSize) - 1];
  else
    llvm::consumeError(logits.takeError());
  (void)sink;
  return 0;
}
