//===- SyntheticVocabulary.h - SentencePiece vocabulary derived for tests -===//
//
// No SentencePiece ("llama" tokenizer) model is installed, so the tests
// derive one from SmolLM2's byte-level BPE vocabulary, deterministically:
// <unk> <s> </s>, the 256 <0xXX> byte tokens, then every normal SmolLM2
// token whose bytes are valid UTF-8, with spaces written as U+2581 and
// score -(SmolLM2 id + 1) (earlier merges rank higher), duplicates skipped.
// The same file, written by the derive_vocabulary tool, is what
// llama-tokenize read to make the reference ids.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_UNIT_MODEL_SYNTHETICVOCABULARY_H
#define SPANC_TEST_UNIT_MODEL_SYNTHETICVOCABULARY_H

#include "runtime/model/GgufWriter.h"

#include "llvm/Support/Error.h"

namespace spanc::model {

/// The derived vocabulary plus `source`'s llama.* hyperparameters (so
/// llama.cpp can load the file vocabulary-only).
llvm::Expected<GgufWriter>
deriveSentencePieceVocabulary(const GgufFile &source);

} // namespace spanc::model

#endif // SPANC_TEST_UNIT_MODEL_SYNTHETICVOCABULARY_H
