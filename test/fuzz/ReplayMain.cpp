//===- ReplayMain.cpp - Replays a fuzz corpus without libFuzzer ----------===//
//
// The test suite's half of fuzzing: a fuzz target's entry point, linked
// with this main instead of libFuzzer, runs over every file of its kept
// corpus (test/fuzz/BUILD). Each file once reached new code in the target;
// any that crashes, aborts (a broken invariant in FuzzCommon.h) or trips
// a sanitizer under --config=asan fails the test, which names the file
// first.
//
//   replay [--min=N] FOLDER...
//
//===----------------------------------------------------------------------===//

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  unsigned minimum = 1;
  std::vector<std::string> files;
  for (int index = 1; index < argc; ++index) {
    llvm::StringRef argument = argv[index];
    if (argument.consume_front("--min=")) {
      if (argument.getAsInteger(10, minimum)) {
        llvm::errs() << "replay: bad --min\n";
        return 2;
      }
      continue;
    }
    std::error_code error;
    for (llvm::sys::fs::directory_iterator it(argument, error), end;
         !error && it != end; it.increment(error))
      if (llvm::sys::fs::is_regular_file(it->path()))
        files.push_back(it->path());
    if (error) {
      llvm::errs() << "replay: " << argument << ": " << error.message() << "\n";
      return 1;
    }
  }
  // A fixed order, so that a failure reproduces as it was seen.
  std::sort(files.begin(), files.end());
  for (const std::string &file : files) {
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      llvm::errs() << "replay: " << file << ": " << buffer.getError().message()
                   << "\n";
      return 1;
    }
    // Named first, so that the input of a crash is the last name printed.
    llvm::errs() << "replay: " << file << "\n";
    LLVMFuzzerTestOneInput(
        reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart()),
        (*buffer)->getBufferSize());
  }
  llvm::outs() << "replayed " << files.size() << " inputs\n";
  if (files.size() < minimum) {
    llvm::errs() << "replay: " << files.size() << " inputs, expected at least "
                 << minimum << " (is the corpus a data dependency?)\n";
    return 1;
  }
  return 0;
}
