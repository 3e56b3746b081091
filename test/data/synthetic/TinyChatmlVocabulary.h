//===- TinyChatmlVocabulary.h - The synthetic ChatML vocabulary -----------===//
//
// The byte-level BPE ("gpt2") vocabulary with the ChatML control tokens and
// a ChatML chat template that the synthetic GGUF files share (the
// tokenizer-only `tiny-chatml-synthetic.gguf` and the tiny random-weight
// models). Deterministic: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>
// (control tokens), then the 256 single bytes in the GPT-2 byte alphabet
// (ids 3 + byte), then the tokens of the merges of a fixed word list (each
// word merged left to right, once bare and once after a space), so common
// words and the role names become one token each.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_DATA_SYNTHETIC_TINYCHATMLVOCABULARY_H
#define SPANC_TEST_DATA_SYNTHETIC_TINYCHATMLVOCABULARY_H

#include "runtime/model/GgufWriter.h"

#include <cstddef>

namespace spanc::synthetic {

/// Adds the tokenizer.* keys (vocabulary, merges, special ids, chat
/// template) to `writer`; returns the vocabulary size.
size_t addTinyChatmlVocabulary(model::GgufWriter &writer);

} // namespace spanc::synthetic

#endif // SPANC_TEST_DATA_SYNTHETIC_TINYCHATMLVOCABULARY_H
