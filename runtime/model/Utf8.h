//===- Utf8.h - UTF-8 as the tokenizers read it
//-----------------------------===//
//
// The tokenizers' view of UTF-8: invalid bytes become U+FFFD (as llama.cpp
// does, so both tokenize the same code points), and a stray continuation
// byte counts as a one-byte sequence.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_UTF8_H
#define SPANC_RUNTIME_MODEL_UTF8_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace spanc::model {

/// Appends `codePoint` (at most U+10FFFF) encoded as UTF-8.
void appendUtf8(std::string &out, uint32_t codePoint);

/// Length of the UTF-8 sequence a lead byte announces (1 for stray
/// continuation bytes, as llama.cpp counts them).
size_t utf8Length(unsigned char lead);

/// Decodes the code point at `offset` (advancing it), or returns false for
/// an invalid sequence (advancing by one byte), which callers replace by
/// U+FFFD as llama.cpp does. Overlong forms, surrogates and values past
/// U+10FFFF are invalid.
bool decodeUtf8(llvm::StringRef text, size_t &offset, uint32_t &codePoint);

/// The text with every invalid UTF-8 byte replaced by U+FFFD, so that the
/// pre-tokenizer regexes see valid UTF-8 (and the same code points
/// llama.cpp sees).
std::string sanitizeUtf8(llvm::StringRef text);

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_UTF8_H
