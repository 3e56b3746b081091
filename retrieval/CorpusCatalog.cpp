//===- CorpusCatalog.cpp - The named corpora a network program may read ---===//

#include "retrieval/CorpusCatalog.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

namespace spanc::retrieval {

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

} // namespace

llvm::Expected<std::pair<std::string, std::string>>
parseCorpusFlag(llvm::StringRef text) {
  auto [name, directory] = text.split('=');
  if (name.size() == text.size() || name.empty() || directory.empty())
    return error("--corpus takes NAME=DIR, got '" + text + "'");
  if (name.front() == '.' || !llvm::all_of(name, isNameChar))
    return error("--corpus name '" + name +
                 "' must be letters, digits, '.', '_' and '-' (not "
                 "starting with '.')");
  return std::make_pair(name.str(), directory.str());
}

CorpusCatalog::~CorpusCatalog() = default;

llvm::Expected<std::unique_ptr<CorpusCatalog>>
CorpusCatalog::open(llvm::ArrayRef<std::pair<std::string, std::string>> given,
                    const IndexOptions &options,
                    const std::function<bool()> &stopRequested) {
  std::unique_ptr<CorpusCatalog> catalog(new CorpusCatalog());
  for (const auto &[name, directory] : given) {
    if (catalog->find(name))
      return error("--corpus " + name + " is given twice");
    if (!llvm::sys::fs::is_directory(directory))
      return error("--corpus " + name + "=" + directory + ": " +
                   (llvm::sys::fs::exists(directory) ? "not a folder"
                                                     : "no such folder"));
    llvm::SmallString<256> real;
    if (std::error_code code = llvm::sys::fs::real_path(directory, real))
      return error("--corpus " + name + "=" + directory + ": " +
                   code.message());
    // Only the corpus's own folder: a link out of it is skipped, as it
    // is for a program's corpus outside --allow-read.
    IndexOptions own = options;
    own.readPolicy.roots.clear();
    auto index = CorpusIndex::open(real, own);
    if (!index)
      return error("--corpus " + name + "=" + directory + ": " +
                   llvm::toString(index.takeError()));
    auto stats = (*index)->refresh(stopRequested);
    if (!stats)
      return error("--corpus " + name + "=" + directory + ": " +
                   llvm::toString(stats.takeError()));
    auto entry = std::make_unique<Entry>();
    entry->name = name;
    entry->directory = std::string(real);
    entry->stats = *stats;
    catalog->corpora.push_back(std::move(entry));
    catalog->indexes.push_back(std::move(*index));
    catalog->locks.push_back(std::make_unique<std::mutex>());
  }
  return catalog;
}

const CorpusCatalog::Entry *CorpusCatalog::find(llvm::StringRef name) const {
  for (const auto &entry : corpora)
    if (entry->name == name)
      return entry.get();
  return nullptr;
}

std::string CorpusCatalog::names() const {
  std::string result;
  for (const auto &entry : corpora)
    result += (result.empty() ? "" : ", ") + entry->name;
  return result;
}

llvm::Expected<std::vector<Fragment>>
CorpusCatalog::retrieve(llvm::StringRef name, llvm::StringRef query,
                        unsigned k) const {
  for (size_t index = 0; index < corpora.size(); ++index) {
    if (corpora[index]->name != name)
      continue;
    // One SQLite connection per corpus; HTTP threads take turns on it.
    std::lock_guard<std::mutex> lock(*locks[index]);
    return indexes[index]->retrieve(query, k);
  }
  return error("no corpus named '" + name + "'");
}

} // namespace spanc::retrieval
