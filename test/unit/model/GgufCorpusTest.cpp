//===- GgufCorpusTest.cpp - Replays the GGUF fuzz corpus through the reader
//-===//
//
// The corpus under test/fuzz/gguf/corpus/ is what libFuzzer found while
// fuzzing the reader (plus hand-made seeds). Replaying it in the ordinary
// test suite (and under --config=asan) keeps every input that once reached
// a new code path from regressing into a crash.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Gguf.h"
#include "runtime/model/Quantization.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <vector>

using namespace spanc::model;

TEST(GgufCorpus, EveryInputParsesOrFailsCleanly) {
  std::error_code error;
  unsigned files = 0, opened = 0;
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
  }
  ASSERT_FALSE(error) << error.message();
  EXPECT_GE(files, 200u);
  EXPECT_GE(opened, 4u); // at least the seeds
}
