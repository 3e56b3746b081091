//===- GgufFuzzer.cpp - libFuzzer target over the GGUF reader -------------===//
//
// Parses arbitrary bytes as a GGUF file; when the file opens, touches every
// metadata value and every tensor byte and dequantizes what can be, so a
// view that points outside the buffer shows up under ASan. Then builds what
// the engine builds from a file's metadata (ModelConfig, Tokenizer,
// ChatTemplate) and runs the tokenizer on a fixed text, so corrupt
// tokenizer metadata is fuzzed too.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Quantization.h"
#include "runtime/model/Tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace spanc::model;

namespace {

uint64_t touch(const GgufValue &value, unsigned depth = 0) {
  uint64_t sum = 0;
  if (auto number = value.asUnsigned())
    sum += *number;
  if (auto text = value.asString())
    for (char c : *text)
      sum += static_cast<unsigned char>(c);
  if (auto number = value.asFloat())
    sum += static_cast<uint64_t>(*number != 0);
  if (depth < 4)
    for (uint64_t i = 0; i < value.arraySize() && i < 4096; ++i)
      sum += touch(value.element(i), depth + 1);
  return sum;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto file = GgufFile::openBuffer(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz");
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  volatile uint64_t sink = 0;
  for (const GgufMetadataEntry &entry : (*file)->metadata())
    sink = sink + touch(entry.value);
  for (const char *key : {"tokenizer.ggml.tokens", "general.name"}) {
    if (auto tokens = (*file)->getStringArray(key))
      sink = sink + tokens->size();
    else
      llvm::consumeError(tokens.takeError());
  }
  std::vector<float> row;
  for (const GgufTensor &tensor : (*file)->tensors()) {
    for (uint64_t i = 0; i < tensor.numBytes; ++i)
      sink = sink + tensor.data[i];
    uint64_t rowLength = tensor.shape.empty() ? 1 : tensor.shape[0];
    if (!canDequantize(tensor.type) || rowLength > (1u << 16) ||
        tensor.numRows() == 0 || tensor.numBytes == 0)
      continue;
    row.resize(rowLength);
    dequantizeRow(tensor.type, tensor.data, row.data(),
                  static_cast<int64_t>(rowLength));
  }

  if (auto config = ModelConfig::fromGguf(**file))
    sink = sink + config->numLayers;
  else
    llvm::consumeError(config.takeError());
  auto tokenizer = Tokenizer::fromGguf(**file);
  if (!tokenizer) {
    llvm::consumeError(tokenizer.takeError());
    return 0;
  }
  for (bool parseSpecial : {false, true}) {
    std::vector<int32_t> ids =
        (*tokenizer)
            ->encode("Hello  world's 1234 caf\xc3\xa9 \xff<|im_start|>x\n",
                     parseSpecial);
    sink = sink + (*tokenizer)->decode(ids).size();
  }
  if (auto chat = ChatTemplate::fromGguf(**file, **tokenizer)) {
    if (auto ids = chat->encodeMessage("user", "hi"))
      sink = sink + ids->size();
    else
      llvm::consumeError(ids.takeError());
    sink = sink + chat->assistantHeader().size();
  } else {
    llvm::consumeError(chat.takeError());
  }
  return 0;
}
