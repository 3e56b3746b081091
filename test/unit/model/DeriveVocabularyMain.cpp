//===- DeriveVocabularyMain.cpp - Writes the derived SentencePiece GGUF ---===//
//
// derive_vocabulary SOURCE.gguf OUT.gguf: the file llama-tokenize reads to
// make tokenizer_smollm2_vocab_spm.json (see test/data/reference/README.md).
//
//===----------------------------------------------------------------------===//

#include "test/unit/model/SyntheticVocabulary.h"

#include "runtime/model/Gguf.h"

#include "llvm/Support/raw_ostream.h"

using namespace spanc::model;

int main(int argc, char **argv) {
  if (argc != 3) {
    llvm::errs() << "usage: derive_vocabulary SOURCE.gguf OUT.gguf\n";
    return 1;
  }
  auto source = GgufFile::open(argv[1]);
  if (!source) {
    llvm::errs() << llvm::toString(source.takeError()) << "\n";
    return 1;
  }
  auto writer = deriveSentencePieceVocabulary(**source);
  if (!writer) {
    llvm::errs() << llvm::toString(writer.takeError()) << "\n";
    return 1;
  }
  if (llvm::Error error = writer->writeToFile(argv[2])) {
    llvm::errs() << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  return 0;
}
