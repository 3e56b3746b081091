//===- RandomText.h - Seeded English-like text for benchmark workloads ----===//
//
// Documents of a given token length made of sentences of common English
// words, drawn from a seeded generator: every run of a benchmark sees the
// same text, and different seeds give documents that share no blocks.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_RANDOMTEXT_H
#define SPANC_BENCH_COMMON_RANDOMTEXT_H

#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string>

namespace spanc::bench {

/// The word list documents are drawn from.
llvm::ArrayRef<const char *> englishWords();

/// Sentences of englishWords() of at most `targetTokens` tokens under
/// `tokenizer` (as close to it as whole words allow), from `seed`.
std::string makeDocument(const model::Tokenizer &tokenizer, uint64_t seed,
                         size_t targetTokens);

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_RANDOMTEXT_H
