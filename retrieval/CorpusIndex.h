//===- CorpusIndex.h - SQLite FTS5 (BM25) index of a corpus folder --------===//
//
// A corpus is a folder of .txt/.md files. Its index lives beside it in
// DIR/.spanc-index.sqlite: one row per fragment (file, byte offset, text),
// searched with FTS5's BM25, plus a content hash per file so that a refresh
// re-chunks only the files that changed and drops those that are gone.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RETRIEVAL_CORPUSINDEX_H
#define SPANC_RETRIEVAL_CORPUSINDEX_H

#include "retrieval/Chunker.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct sqlite3;

namespace spanc::retrieval {

/// The index file's name inside the corpus folder. Names starting with '.'
/// are never indexed themselves.
inline constexpr const char *IndexFileName = ".spanc-index.sqlite";

/// A retrieved fragment: where it is and what it says.
struct Fragment {
  /// Path relative to the corpus folder, '/'-separated.
  std::string path;
  /// Byte offset and length of the fragment in that file.
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string text;
  /// BM25 relevance, higher is better (FTS5's bm25() negated).
  double score = 0;
};

/// What a refresh did.
struct RefreshStats {
  unsigned filesAdded = 0;
  unsigned filesChanged = 0;
  unsigned filesUnchanged = 0;
  unsigned filesRemoved = 0;
  /// Fragments written by this refresh, and in the index after it.
  unsigned fragmentsWritten = 0;
  unsigned fragmentsTotal = 0;
};

class CorpusIndex {
public:
  /// Opens the index of the corpus folder `corpusDir`, creating the index
  /// file if needed. A folder that does not exist or is not a folder is an
  /// error. Where the folder is not writable the index is kept in memory
  /// (rebuilt by every process), so read-only corpora still work. An index
  /// built with other chunk options or an older schema is rebuilt.
  static llvm::Expected<std::unique_ptr<CorpusIndex>>
  open(llvm::StringRef corpusDir, const ChunkOptions &chunking = {});

  ~CorpusIndex();
  CorpusIndex(const CorpusIndex &) = delete;
  CorpusIndex &operator=(const CorpusIndex &) = delete;

  /// Brings the index up to date with the folder: files whose content hash
  /// changed are re-chunked, new files added, deleted files removed. A file
  /// that cannot be read is an error naming it; the index is then unchanged.
  llvm::Expected<RefreshStats> refresh();

  /// The `k` fragments most relevant to the free-text `query` by BM25, best
  /// first; equal scores are ordered by path, then offset. Any text is a
  /// valid query (it is reduced to quoted terms); one with no searchable
  /// term returns nothing.
  llvm::Expected<std::vector<Fragment>> retrieve(llvm::StringRef query,
                                                 unsigned k) const;

  /// The folder, as given to open().
  llvm::StringRef corpusDir() const { return directory; }
  /// The index file, or ":memory:" for an in-memory index.
  llvm::StringRef indexPath() const { return path; }
  bool isInMemory() const { return path == ":memory:"; }

private:
  CorpusIndex(std::string directory, std::string path, sqlite3 *database,
              ChunkOptions chunking);

  std::string directory;
  std::string path;
  sqlite3 *database;
  ChunkOptions chunking;
};

/// Turns free text into an FTS5 MATCH expression that can never be a
/// syntax error: its words (runs of ASCII letters and digits and of
/// non-ASCII bytes), lower-cased, deduplicated, each quoted, joined by OR so
/// that BM25 ranks fragments by how many and how rare the words they share
/// are. At most `maxTerms` words are kept. Empty when there is no word.
std::string toMatchExpression(llvm::StringRef text, unsigned maxTerms = 64);

} // namespace spanc::retrieval

#endif // SPANC_RETRIEVAL_CORPUSINDEX_H
