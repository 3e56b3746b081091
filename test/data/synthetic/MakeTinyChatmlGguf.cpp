//===- MakeTinyChatmlGguf.cpp - A tiny synthetic ChatML vocabulary GGUF ---===//
//
// Writes `tiny-chatml-synthetic.gguf`: the synthetic ChatML vocabulary and
// chat template (TinyChatmlVocabulary.h) and no tensors. It is what `spanc
// compile --emit=plan` needs (tokenizer and chat template, never weights),
// small enough to generate at build time, so the plan lit tests do not
// depend on the installed SmolLM2 model.
//
//===----------------------------------------------------------------------===//

#include "test/data/synthetic/TinyChatmlVocabulary.h"

#include "runtime/model/GgufWriter.h"

#include "llvm/Support/raw_ostream.h"

using namespace spanc::model;

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: make_tiny_chatml_gguf OUT.gguf\n";
    return 2;
  }
  GgufWriter writer;
  writer.addString("general.architecture", "llama");
  writer.addString("general.name", "tiny-chatml-synthetic");
  spanc::synthetic::addTinyChatmlVocabulary(writer);
  if (llvm::Error error = writer.writeToFile(argv[1])) {
    llvm::errs() << "make_tiny_chatml_gguf: "
                 << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  return 0;
}
