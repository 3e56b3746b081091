//===- CorpusIndex.h - SQLite FTS5 (BM25) index of a corpus folder --------===//
//
// A corpus is a folder of .txt/.md files. Its index is an SQLite file in
// an index folder (by default ~/.cache/spanc/index; never the corpus, which
// may belong to someone else or be read-only): one row per fragment (file,
// byte offset, text), searched with FTS5's BM25, plus a content hash per
// file so that a refresh re-chunks only the files that changed and drops
// those that are gone (and gives their space back).
//
// What a corpus may hold is bounded: a file's real path must lie in the
// corpus or another folder the read policy allows (a link to /etc/passwd
// is skipped, never followed), it must be a regular text file of at most
// the policy's maxFileBytes, and the corpus at most maxFragments
// fragments.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RETRIEVAL_CORPUSINDEX_H
#define SPANC_RETRIEVAL_CORPUSINDEX_H

#include "retrieval/Chunker.h"
#include "support/FileAccess.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct sqlite3;

namespace spanc::retrieval {

/// The default of IndexOptions::maxFragments (`--max-corpus-fragments`):
/// some 200 MB of text at the default chunk size.
inline constexpr uint64_t kDefaultMaxFragments = 200'000;

/// Where indexes go when IndexOptions::indexDirectory is empty:
/// $SPANC_INDEX_DIR, else $XDG_CACHE_HOME/spanc/index, else
/// $HOME/.cache/spanc/index; empty when none is set (indexes then stay in
/// memory).
std::string defaultIndexDirectory();

struct IndexOptions {
  ChunkOptions chunking;
  /// The folder of index files; empty: defaultIndexDirectory(). An index is
  /// kept in memory (rebuilt by every process) where this folder cannot be
  /// created or written.
  std::string indexDirectory;
  /// Keep the index in memory only.
  bool inMemory = false;
  /// Where a corpus file may really lie besides the corpus folder (which
  /// is always allowed), and the most bytes one file may hold.
  support::ReadPolicy readPolicy;
  /// The most fragments a corpus may have after a refresh.
  uint64_t maxFragments = kDefaultMaxFragments;
};

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
  /// Links whose target lies outside the corpus and the allowed folders:
  /// skipped, never read.
  unsigned linksSkipped = 0;
  /// Whether deleted rows were given back to the file system (VACUUM).
  bool compacted = false;
};

class CorpusIndex {
public:
  /// Opens the index of the corpus folder `corpusDir`, creating the index
  /// file if needed: one file per corpus in the index folder, named after
  /// the corpus folder's real path. A folder that does not exist or is not
  /// a folder is an error. Where the index folder is not writable the index
  /// is kept in memory (rebuilt by every process). An index built with
  /// other chunk options or an older schema is rebuilt.
  static llvm::Expected<std::unique_ptr<CorpusIndex>>
  open(llvm::StringRef corpusDir, const IndexOptions &options = {});

  ~CorpusIndex();
  CorpusIndex(const CorpusIndex &) = delete;
  CorpusIndex &operator=(const CorpusIndex &) = delete;

  /// Brings the index up to date with the folder: files whose content hash
  /// changed are re-chunked, new files added, deleted files removed, and
  /// the file compacted when that freed much of it. A file that cannot be
  /// read (or is too large, or not text) is an error naming it; the index
  /// is then unchanged. So is it when `stopRequested` (asked between files)
  /// returns true: the refresh then fails with "interrupted".
  llvm::Expected<RefreshStats>
  refresh(const std::function<bool()> &stopRequested = nullptr);

  /// The `k` fragments most relevant to the free-text `query` by BM25, best
  /// first; equal scores are ordered by path, then offset. Any text is a
  /// valid query (it is reduced to quoted terms); one with no searchable
  /// term returns nothing.
  llvm::Expected<std::vector<Fragment>> retrieve(llvm::StringRef query,
                                                 unsigned k) const;

  /// The folder, as given to open().
  llvm::StringRef corpusDir() const { return directory; }
  /// Where its files really are (links resolved).
  llvm::StringRef corpusRealDir() const { return realDirectory; }
  /// The index file, or ":memory:" for an in-memory index.
  llvm::StringRef indexPath() const { return path; }
  bool isInMemory() const { return path == ":memory:"; }

private:
  CorpusIndex(std::string directory, std::string realDirectory,
              std::string path, sqlite3 *database, IndexOptions options);

  std::string directory;
  std::string realDirectory;
  std::string path;
  sqlite3 *database;
  IndexOptions options;
};

/// Turns free text into an FTS5 MATCH expression that can never be a
/// syntax error: its words (runs of ASCII letters and digits and of
/// non-ASCII bytes), lower-cased, deduplicated, each quoted, joined by OR so
/// that BM25 ranks fragments by how many and how rare the words they share
/// are. At most `maxTerms` words are kept. Empty when there is no word.
std::string toMatchExpression(llvm::StringRef text, unsigned maxTerms = 64);

} // namespace spanc::retrieval

#endif // SPANC_RETRIEVAL_CORPUSINDEX_H
