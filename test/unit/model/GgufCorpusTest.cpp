//===- GgufCorpusTest.cpp - Replays the GGUF fuzz corpus through the reader
//-===//
//
// The corpus under test/fuzz/gguf/corpus/ is what libFuzzer found while
// fuzzing the reader (plus hand-made seeds). Replaying it in the ordinary
// test suite (and under --config=asan) keeps every input that once reached
// a new code path from regressing into a crash — in the reader and in what
// is built from a file's metadata (ModelConfig, Tokenizer, ChatTemplate).
//
//===----------------------------------------------------------------------===//

#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Quantization.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <vector>

using namespace spanc::model;

TEST(GgufCorpus, EveryInputParsesOrFailsCleanly) {
  std::error_code error;
  unsigned files = 0, opened = 0, tokenizers = 0;
  std::vector<float> row;
  for (llvm::sys::fs::directory_iterator entry("test/fuzz/gguf/corpus", error),
       end;
       entry != end && !error; entry.increment(error)) {
    auto buffer = llvm::MemoryBuffer::getFile(entry->path());
    ASSERT_TRUE(static_cast<bool>(buffer)) << entry->path();
    ++files;
    auto file = GgufFile::openBuffer((*buffer)->getBuffer(), entry->path());
    bool isSeed = llvm::sys::path::filename(entry->path()).startswith("seed-");
    if (!file) {
      std::string message = llvm::toString(file.takeError());
      EXPECT_FALSE(isSeed) << message;
      // Errors name the input first.
      EXPECT_EQ(message.rfind(entry->path(), 0), 0u) << message;
      continue;
    }
    ++opened;
    for (const GgufTensor &tensor : (*file)->tensors()) {
      uint64_t rowLength = tensor.shape.empty() ? 1 : tensor.shape[0];
      if (!canDequantize(tensor.type) || tensor.numBytes == 0 ||
          rowLength > (1u << 16))
        continue;
      row.resize(rowLength);
      dequantizeRow(tensor.type, tensor.data, row.data(),
                    static_cast<int64_t>(rowLength));
    }
    if (auto config = ModelConfig::fromGguf(**file))
      EXPECT_GT(config->numLayers, 0u);
    else
      llvm::consumeError(config.takeError());
    auto tokenizer = Tokenizer::fromGguf(**file);
    if (!tokenizer) {
      llvm::consumeError(tokenizer.takeError());
      continue;
    }
    ++tokenizers;
    for (bool parseSpecial : {false, true}) {
      std::vector<int32_t> ids =
          (*tokenizer)
              ->encode("Hello  world's 1234 caf\xc3\xa9 \xff<|im_start|>x\n",
                       parseSpecial);
      for (int32_t id : ids)
        EXPECT_TRUE(id >= 0 && id < (*tokenizer)->vocabSize());
      (void)(*tokenizer)->decode(ids);
    }
    if (auto chat = ChatTemplate::fromGguf(**file, **tokenizer)) {
      if (auto ids = chat->encodeMessage("user", "hi"))
        EXPECT_FALSE(ids->empty());
      else
        llvm::consumeError(ids.takeError());
    } else {
      llvm::consumeError(chat.takeError());
    }
  }
  ASSERT_FALSE(error) << error.message();
  EXPECT_GE(files, 200u);
  EXPECT_GE(opened, 7u);     // at least the seeds
  EXPECT_GE(tokenizers, 2u); // at least the two tokenizer seeds
}
