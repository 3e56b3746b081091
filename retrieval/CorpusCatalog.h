//===- CorpusCatalog.h - The named corpora a network program may read -----===//
//
// spanc serve --corpus NAME=DIR (repeatable): the only corpora a program
// sent over the network may retrieve from (docs/ARCHITECTURE.md, "File
// access"). The server's owner names each folder once; a program names
// only the NAME, never a path, so nothing else on the machine can be
// reached. Each folder is resolved to its real path and indexed (or its
// index brought up to date) when the catalog opens, so requests only
// search; its links are followed only inside it, as CorpusIndex does for
// a program's own folder. Searches from several HTTP threads take turns
// on one connection per corpus.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RETRIEVAL_CORPUSCATALOG_H
#define SPANC_RETRIEVAL_CORPUSCATALOG_H

#include "retrieval/CorpusIndex.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace spanc::retrieval {

/// Splits "NAME=DIR" (--corpus). NAME is letters, digits, '.', '_' and '-'
/// and does not start with '.'; DIR is not empty.
llvm::Expected<std::pair<std::string, std::string>>
parseCorpusFlag(llvm::StringRef text);

class CorpusCatalog {
public:
  struct Entry {
    std::string name;
    /// The folder's real path (links and `..` resolved).
    std::string directory;
    RefreshStats stats;
  };

  /// Opens and refreshes the index of every (NAME, DIR). A folder that
  /// does not exist or is not a folder, a name given twice, or a corpus
  /// that cannot be indexed is an error naming it. `options.readPolicy`'s
  /// roots are ignored: a corpus reads only inside its own folder.
  static llvm::Expected<std::unique_ptr<CorpusCatalog>>
  open(llvm::ArrayRef<std::pair<std::string, std::string>> corpora,
       const IndexOptions &options,
       const std::function<bool()> &stopRequested = nullptr);

  ~CorpusCatalog();

  bool empty() const { return corpora.empty(); }
  /// The entry named `name`, or null.
  const Entry *find(llvm::StringRef name) const;
  /// The names, in the order given, comma-separated (for messages).
  std::string names() const;
  llvm::ArrayRef<std::unique_ptr<Entry>> entries() const { return corpora; }

  /// CorpusIndex::retrieve on the corpus `name` (which must exist).
  llvm::Expected<std::vector<Fragment>>
  retrieve(llvm::StringRef name, llvm::StringRef query, unsigned k) const;

private:
  CorpusCatalog() = default;

  std::vector<std::unique_ptr<Entry>> corpora;
  std::vector<std::unique_ptr<CorpusIndex>> indexes; ///< by entry
  mutable std::vector<std::unique_ptr<std::mutex>> locks;
};

} // namespace spanc::retrieval

#endif // SPANC_RETRIEVAL_CORPUSCATALOG_H
