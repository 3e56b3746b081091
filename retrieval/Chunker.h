//===- Chunker.h - Split corpus text into retrieval fragments -------------===//
//
// A corpus file becomes a list of fragments: one per paragraph, short
// paragraphs (headings, list leads) joined to the paragraph after them, and
// paragraphs over a size cap cut into overlapping windows. A fragment is a
// byte range of the file, so it always knows where it came from.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RETRIEVAL_CHUNKER_H
#define SPANC_RETRIEVAL_CHUNKER_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <string>

namespace spanc::retrieval {

/// How text is cut into fragments. The defaults keep a fragment to a few
/// hundred tokens: small enough to be one cached span, large enough to
/// carry a whole thought.
struct ChunkOptions {
  /// Upper bound on a fragment's length in bytes.
  size_t maxBytes = 1024;
  /// Bytes shared by consecutive windows of a paragraph longer than
  /// maxBytes, so a sentence cut at a window edge is whole in one of them.
  /// Must be less than maxBytes / 2 (a window advances at least that far).
  size_t overlapBytes = 128;
  /// A paragraph shorter than this joins the paragraph that follows it.
  size_t minBytes = 80;

  /// A stable description, stored in the index so that changing the
  /// options rebuilds it.
  std::string describe() const;
};

/// A fragment of a text: `text.substr(offset, length)`.
struct Chunk {
  size_t offset = 0;
  size_t length = 0;

  bool operator==(const Chunk &other) const {
    return offset == other.offset && length == other.length;
  }
};

/// Cuts `text` into fragments in text order. Blank lines (only spaces,
/// tabs, CR) separate paragraphs; a fragment never starts or ends with
/// whitespace and never splits a UTF-8 sequence. Text with no visible
/// characters has no fragments.
llvm::SmallVector<Chunk, 8> chunkText(llvm::StringRef text,
                                      const ChunkOptions &options = {});

} // namespace spanc::retrieval

#endif // SPANC_RETRIEVAL_CHUNKER_H
