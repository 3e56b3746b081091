//===- AccuracyTasks.h - The accuracy benchmark's questions -----*- C++ -*-===//
//
// The tasks of `spanc bench accuracy` (AccuracyBench.cpp's header comment
// says what each asks): contexts of documents with a question per
// document, built from seeded random text, bench/accuracy/prose.json or the
// Python documentation's reST sources.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_ACCURACY_ACCURACYTASKS_H
#define SPANC_BENCH_ACCURACY_ACCURACYTASKS_H

#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace spanc::bench {

/// What a question asks and which answers count.
struct Question {
  std::string text;
  std::vector<std::string> accepted;
  /// Whether the answer must hold every accepted string (multihop), not
  /// one of them.
  bool needsAll = false;
};

/// An error saying `message` (a setting or an input of the benchmark).
llvm::Error failure(const llvm::Twine &message);

/// A task's name and whether its documents have a length setting.
bool isTask(llvm::StringRef name);
bool hasDocTokens(llvm::StringRef task);

struct Context {
  std::vector<std::string> documents;
  std::vector<Question> questions; // one per document, in document order
};

/// One prose document of prose.json and its questions.
struct ProseDocument {
  std::string text;
  std::vector<Question> questions;
};

/// codes: `docs` documents of seeded random hay (`docTokens` each), each
/// with a planted "The code of FIRST LAST is NNNN."; a question each.
Context makeCodesContext(const model::Tokenizer &tokenizer, int64_t docs,
                         int64_t docTokens, uint64_t seed,
                         std::mt19937_64 &random);

/// The prose paragraphs of the reST files under `folder` (recursively, in
/// name order): blocks between blank lines that are neither directives,
/// code, tables nor headings, of at least 30 words.
llvm::Expected<std::vector<std::string>> loadPassages(llvm::StringRef folder);

/// multihop: Python documentation passages with a planted code each;
/// question d asks for the codes of documents d and d + N/2 (mod N).
Context makeMultihopContext(const model::Tokenizer &tokenizer,
                            llvm::ArrayRef<std::string> paragraphs,
                            int64_t docs, int64_t docTokens,
                            std::mt19937_64 &random);

/// prose: `docs` distinct documents of the pool, one question of each.
Context makeProseContext(llvm::ArrayRef<ProseDocument> pool, int64_t docs,
                         std::mt19937_64 &random);

/// prose.json: [{"text": ..., "questions": [{"question": ..., "answers":
/// [...]}, ...]}, ...].
llvm::Expected<std::vector<ProseDocument>> loadProse(llvm::StringRef path);

} // namespace spanc::bench

#endif // SPANC_BENCH_ACCURACY_ACCURACYTASKS_H
