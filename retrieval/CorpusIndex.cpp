//===- CorpusIndex.cpp - SQLite FTS5 (BM25) index of a corpus folder ------===//

#include "retrieval/CorpusIndex.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA1.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstdlib>

namespace spanc::retrieval {

namespace {

/// Bump when the tables change; the chunk options and tokenizer are part of
/// the layout too, since fragments made with others are not comparable.
constexpr const char *SchemaVersion = "spanc-retrieval-1";
constexpr const char *Tokenizer = "porter unicode61";

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A prepared statement that finalizes itself.
class Statement {
public:
  Statement() = default;
  Statement(Statement &&other) : handle(other.handle) {
    other.handle = nullptr;
  }
  Statement &operator=(Statement &&other) {
    std::swap(handle, other.handle);
    return *this;
  }
  ~Statement() { sqlite3_finalize(handle); }

  int prepare(sqlite3 *database, llvm::StringRef sql) {
    sqlite3_finalize(handle);
    handle = nullptr;
    return sqlite3_prepare_v2(database, sql.data(),
                              static_cast<int>(sql.size()), &handle, nullptr);
  }
  void bind(int index, llvm::StringRef text) {
    // A null pointer would bind SQL NULL; empty text must stay text.
    sqlite3_bind_text(handle, index, text.empty() ? "" : text.data(),
                      static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void bind(int index, int64_t value) {
    sqlite3_bind_int64(handle, index, value);
  }
  int step() { return sqlite3_step(handle); }
  void reset() {
    sqlite3_reset(handle);
    sqlite3_clear_bindings(handle);
  }
  llvm::StringRef text(int column) const {
    const unsigned char *data = sqlite3_column_text(handle, column);
    int size = sqlite3_column_bytes(handle, column);
    return data ? llvm::StringRef(reinterpret_cast<const char *>(data), size)
                : llvm::StringRef();
  }
  int64_t integer(int column) const {
    return sqlite3_column_int64(handle, column);
  }
  double real(int column) const {
    return sqlite3_column_double(handle, column);
  }

private:
  sqlite3_stmt *handle = nullptr;
};

/// Formats SQLite's last error on `database` for the index at `path`.
llvm::Error databaseError(sqlite3 *database, llvm::StringRef path,
                          const llvm::Twine &doing) {
  return makeError("corpus index '" + path + "': " + doing + ": " +
                   (database ? sqlite3_errmsg(database) : "out of memory"));
}

llvm::Error execute(sqlite3 *database, llvm::StringRef path, const char *sql) {
  char *message = nullptr;
  if (sqlite3_exec(database, sql, nullptr, nullptr, &message) == SQLITE_OK)
    return llvm::Error::success();
  std::string text = message ? message : sqlite3_errmsg(database);
  sqlite3_free(message);
  return makeError("corpus index '" + path + "': " + text);
}

llvm::Error prepare(sqlite3 *database, llvm::StringRef path, Statement &stmt,
                    llvm::StringRef sql) {
  if (stmt.prepare(database, sql) != SQLITE_OK)
    return databaseError(database, path, "preparing a statement");
  return llvm::Error::success();
}

/// Rolls back unless committed, so an error leaves the index as it was.
class Transaction {
public:
  Transaction(sqlite3 *database, llvm::StringRef path)
      : database(database), path(path) {}
  ~Transaction() {
    if (open)
      sqlite3_exec(database, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  llvm::Error begin() {
    // IMMEDIATE takes the write lock up front: two spanc processes
    // refreshing one corpus then serialize instead of failing mid-way.
    if (llvm::Error error = execute(database, path, "BEGIN IMMEDIATE"))
      return error;
    open = true;
    return llvm::Error::success();
  }
  llvm::Error commit() {
    open = false;
    return execute(database, path, "COMMIT");
  }

private:
  sqlite3 *database;
  llvm::StringRef path;
  bool open = false;
};

std::string layoutOf(const ChunkOptions &chunking) {
  return std::string(SchemaVersion) + ";" + chunking.describe() +
         ";tokenize=" + Tokenizer;
}

/// Creates the tables, or recreates them when the stored layout differs.
llvm::Error ensureSchema(sqlite3 *database, llvm::StringRef path,
                         const ChunkOptions &chunking) {
  Transaction transaction(database, path);
  if (llvm::Error error = transaction.begin())
    return error;
  if (llvm::Error error =
          execute(database, path,
                  "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, "
                  "value TEXT NOT NULL)"))
    return error;
  std::string layout = layoutOf(chunking);
  Statement select;
  if (llvm::Error error = prepare(database, path, select,
                                  "SELECT value FROM meta WHERE key='layout'"))
    return error;
  int rc = select.step();
  bool current = rc == SQLITE_ROW && select.text(0) == layout;
  // A statement still running would keep the tables locked against DROP.
  select.reset();
  if (current)
    return transaction.commit();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return databaseError(database, path, "reading the layout");

  // fragments holds the rows; fragment_search is an external-content FTS5
  // table over their text, kept in sync by triggers (the pattern SQLite's
  // FTS5 documentation gives), so the text is stored once.
  std::string sql =
      "DROP TABLE IF EXISTS fragment_search;"
      "DROP TABLE IF EXISTS fragments;"
      "DROP TABLE IF EXISTS files;"
      "CREATE TABLE files(path TEXT PRIMARY KEY, hash TEXT NOT NULL);"
      "CREATE TABLE fragments(id INTEGER PRIMARY KEY, path TEXT NOT NULL, "
      "offset INTEGER NOT NULL, length INTEGER NOT NULL, body TEXT NOT NULL);"
      "CREATE INDEX fragments_by_path ON fragments(path);"
      "CREATE VIRTUAL TABLE fragment_search USING fts5(body, "
      "content='fragments', content_rowid='id', tokenize='" +
      std::string(Tokenizer) +
      "');"
      "CREATE TRIGGER fragments_inserted AFTER INSERT ON fragments BEGIN "
      "INSERT INTO fragment_search(rowid, body) VALUES (new.id, new.body); "
      "END;"
      "CREATE TRIGGER fragments_deleted AFTER DELETE ON fragments BEGIN "
      "INSERT INTO fragment_search(fragment_search, rowid, body) "
      "VALUES ('delete', old.id, old.body); END;";
  if (llvm::Error error = execute(database, path, sql.c_str()))
    return error;
  Statement store;
  if (llvm::Error error = prepare(
          database, path, store,
          "INSERT OR REPLACE INTO meta(key, value) VALUES ('layout', ?1)"))
    return error;
  store.bind(1, layout);
  if (store.step() != SQLITE_DONE)
    return databaseError(database, path, "storing the layout");
  return transaction.commit();
}

bool isCorpusFile(llvm::StringRef name) {
  llvm::StringRef extension = llvm::sys::path::extension(name);
  return extension.equals_insensitive(".txt") ||
         extension.equals_insensitive(".md");
}

/// The corpus files under `directory` (a real path), relative and sorted.
struct CorpusListing {
  std::vector<std::string> files;
  unsigned linksSkipped = 0;
};

/// Hidden entries (.git, editor files) are skipped; links to folders are
/// not followed (no cycles), links to files only when the file really lies
/// where `policy` allows (the corpus or an allowed folder): a link is how a
/// corpus would leak a file its owner never meant to share.
llvm::Expected<CorpusListing>
listCorpusFiles(llvm::StringRef directory, const support::ReadPolicy &policy) {
  CorpusListing listing;
  std::error_code ec;
  llvm::sys::fs::recursive_directory_iterator it(directory, ec,
                                                 /*follow_symlinks=*/false);
  for (llvm::sys::fs::recursive_directory_iterator end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef entryPath = it->path();
    llvm::StringRef name = llvm::sys::path::filename(entryPath);
    llvm::sys::fs::file_type type = it->type();
    if (name.startswith(".")) {
      if (type == llvm::sys::fs::file_type::directory_file)
        it.no_push();
      continue;
    }
    if (!isCorpusFile(name))
      continue;
    if (type == llvm::sys::fs::file_type::symlink_file) {
      llvm::SmallString<256> target;
      if (llvm::sys::fs::real_path(entryPath, target))
        continue; // A dangling link is not a corpus file.
      if (!support::isInsideRoots(target, policy)) {
        ++listing.linksSkipped;
        continue;
      }
      llvm::sys::fs::file_status status;
      if (llvm::sys::fs::status(target, status))
        continue;
      type = status.type();
    }
    if (type != llvm::sys::fs::file_type::regular_file)
      continue;
    llvm::StringRef relative = entryPath.drop_front(directory.size());
    relative = relative.ltrim(llvm::sys::path::get_separator());
    listing.files.push_back(relative.str());
  }
  if (ec)
    return makeError("cannot list corpus '" + directory + "': " + ec.message());
  llvm::sort(listing.files);
  return listing;
}

/// The index file of the corpus at `realDirectory`: its folder's name (for
/// people looking at the cache) and a hash of its whole real path (so two
/// corpora named alike never share an index).
std::string indexFileName(llvm::StringRef realDirectory) {
  std::string name;
  for (char c : llvm::sys::path::filename(realDirectory))
    name += llvm::isAlnum(c) || c == '-' || c == '_' || c == '.' ? c : '_';
  std::array<uint8_t, 20> digest =
      llvm::SHA1::hash(llvm::arrayRefFromStringRef(realDirectory));
  return (name.empty() ? "root" : name) + "-" +
         llvm::toHex(llvm::ArrayRef<uint8_t>(digest).take_front(8),
                     /*LowerCase=*/true) +
         ".sqlite";
}

} // namespace

std::string defaultIndexDirectory() {
  if (const char *explicitDirectory = std::getenv("SPANC_INDEX_DIR"))
    return explicitDirectory;
  llvm::SmallString<256> directory;
  if (const char *cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    directory = cache;
  else if (const char *home = std::getenv("HOME"); home && *home)
    llvm::sys::path::append(directory, home, ".cache");
  else
    return "";
  llvm::sys::path::append(directory, "spanc", "index");
  return std::string(directory);
}

CorpusIndex::CorpusIndex(std::string directory, std::string realDirectory,
                         std::string path, sqlite3 *database,
                         IndexOptions options)
    : directory(std::move(directory)), realDirectory(std::move(realDirectory)),
      path(std::move(path)), database(database), options(std::move(options)) {
  // A corpus may always read itself.
  this->options.readPolicy.roots.push_back(this->realDirectory);
}

CorpusIndex::~CorpusIndex() { sqlite3_close(database); }

llvm::Expected<std::unique_ptr<CorpusIndex>>
CorpusIndex::open(llvm::StringRef corpusDir, const IndexOptions &options) {
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(corpusDir, status)) {
    if (ec == std::errc::no_such_file_or_directory)
      return makeError("corpus '" + corpusDir + "' does not exist");
    return makeError("cannot access corpus '" + corpusDir +
                     "': " + ec.message());
  }
  if (status.type() != llvm::sys::fs::file_type::directory_file)
    return makeError("corpus '" + corpusDir + "' is not a folder");
  llvm::SmallString<256> realDirectory;
  if (std::error_code ec = llvm::sys::fs::real_path(corpusDir, realDirectory))
    return makeError("cannot access corpus '" + corpusDir +
                     "': " + ec.message());

  std::string path = ":memory:";
  std::string indexDirectory = options.indexDirectory.empty()
                                   ? defaultIndexDirectory()
                                   : options.indexDirectory;
  if (!options.inMemory && !indexDirectory.empty() &&
      !llvm::sys::fs::create_directories(indexDirectory) &&
      !llvm::sys::fs::access(indexDirectory,
                             llvm::sys::fs::AccessMode::Write)) {
    llvm::SmallString<256> indexFile(indexDirectory);
    llvm::sys::path::append(indexFile, indexFileName(realDirectory));
    path = std::string(indexFile);
  }

  // A damaged index file is ours to throw away: rebuild it once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    sqlite3 *database = nullptr;
    if (sqlite3_open_v2(path.c_str(), &database,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        nullptr) != SQLITE_OK) {
      llvm::Error error = databaseError(database, path, "cannot open");
      sqlite3_close(database);
      return error;
    }
    // A write-protected index file opens read-only; an index we cannot
    // update would go stale, so use a private one in memory instead.
    if (sqlite3_db_readonly(database, "main") == 1) {
      sqlite3_close(database);
      path = ":memory:";
      continue;
    }
    sqlite3_busy_timeout(database, 10000);
    std::unique_ptr<CorpusIndex> index(new CorpusIndex(
        corpusDir.str(), std::string(realDirectory), path, database, options));
    llvm::Error error = ensureSchema(database, path, options.chunking);
    if (!error)
      return index;
    int code = sqlite3_errcode(database);
    index.reset();
    if (attempt == 0 && path != ":memory:" &&
        (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)) {
      llvm::consumeError(std::move(error));
      llvm::sys::fs::remove(path);
      continue;
    }
    return error;
  }
  return makeError("corpus index '" + path + "' cannot be opened");
}

llvm::Expected<RefreshStats>
CorpusIndex::refresh(const std::function<bool()> &stopRequested) {
  llvm::Expected<CorpusListing> listing =
      listCorpusFiles(realDirectory, options.readPolicy);
  if (!listing)
    return listing.takeError();

  RefreshStats stats;
  stats.linksSkipped = listing->linksSkipped;
  bool compact = false;
  {
    Transaction transaction(database, path);
    if (llvm::Error error = transaction.begin())
      return error;

    llvm::StringMap<std::string> knownHashes;
    {
      Statement select;
      if (llvm::Error error =
              prepare(database, path, select, "SELECT path, hash FROM files"))
        return error;
      int rc;
      while ((rc = select.step()) == SQLITE_ROW)
        knownHashes[select.text(0)] = select.text(1).str();
      if (rc != SQLITE_DONE)
        return databaseError(database, path, "reading the file table");
    }
    // The fragment count as the refresh goes, so that a corpus over the
    // limit stops as soon as it is.
    int64_t fragments = 0;
    int64_t droppedFragments = 0;
    {
      Statement count;
      if (llvm::Error error =
              prepare(database, path, count, "SELECT count(*) FROM fragments"))
        return error;
      if (count.step() != SQLITE_ROW)
        return databaseError(database, path, "counting fragments");
      fragments = count.integer(0);
    }
    const int64_t fragmentsBefore = fragments;

    Statement deleteFragments, insertFragment, storeFile, deleteFile;
    if (llvm::Error error = prepare(database, path, deleteFragments,
                                    "DELETE FROM fragments WHERE path = ?1"))
      return error;
    if (llvm::Error error =
            prepare(database, path, insertFragment,
                    "INSERT INTO fragments(path, offset, length, body) "
                    "VALUES (?1, ?2, ?3, ?4)"))
      return error;
    if (llvm::Error error =
            prepare(database, path, storeFile,
                    "INSERT OR REPLACE INTO files(path, hash) VALUES (?1, ?2)"))
      return error;
    if (llvm::Error error = prepare(database, path, deleteFile,
                                    "DELETE FROM files WHERE path = ?1"))
      return error;

    auto dropFragments = [&](llvm::StringRef file) -> llvm::Error {
      deleteFragments.reset();
      deleteFragments.bind(1, file);
      if (deleteFragments.step() != SQLITE_DONE)
        return databaseError(database, path,
                             "removing fragments of '" + file + "'");
      fragments -= sqlite3_changes(database);
      droppedFragments += sqlite3_changes(database);
      return llvm::Error::success();
    };
    auto interrupted = [&] {
      return makeError("indexing corpus '" + directory +
                       "' interrupted; its index is as it was");
    };

    llvm::StringSet<> present;
    for (const std::string &file : listing->files) {
      // Between files: rolling back leaves the index as it was.
      if (stopRequested && stopRequested())
        return interrupted();
      present.insert(file);
      llvm::SmallString<256> fullPath(realDirectory);
      llvm::sys::path::append(fullPath, file);
      // Hashing every file costs a read of the corpus, but unlike size and
      // mtime a content hash never misses an edit.
      llvm::Expected<std::string> content =
          support::readFile(fullPath, options.readPolicy);
      if (!content)
        return makeError("cannot read corpus file " +
                         llvm::toString(content.takeError()));
      // Random bytes chunk into fragments too, tens of thousands of them
      // that mean nothing: a corpus is text.
      if (size_t zero = content->find('\0'); zero != std::string::npos)
        return makeError("corpus file '" + fullPath +
                         "' is not text (a NUL byte at offset " +
                         llvm::Twine(zero) + ")");
      std::string hash =
          llvm::toHex(llvm::SHA1::hash(llvm::arrayRefFromStringRef(*content)),
                      /*LowerCase=*/true);
      auto known = knownHashes.find(file);
      if (known != knownHashes.end() && known->second == hash) {
        ++stats.filesUnchanged;
        continue;
      }
      if (known != knownHashes.end()) {
        ++stats.filesChanged;
        if (llvm::Error error = dropFragments(file))
          return error;
      } else {
        ++stats.filesAdded;
      }
      for (const Chunk &chunk : chunkText(*content, options.chunking)) {
        if (uint64_t(++fragments) > options.maxFragments)
          return makeError("corpus '" + directory + "' has more than " +
                           llvm::Twine(options.maxFragments) +
                           " fragments (at '" + file +
                           "'); raise the limit with --max-corpus-fragments");
        insertFragment.reset();
        insertFragment.bind(1, file);
        insertFragment.bind(2, static_cast<int64_t>(chunk.offset));
        insertFragment.bind(3, static_cast<int64_t>(chunk.length));
        insertFragment.bind(
            4, llvm::StringRef(*content).substr(chunk.offset, chunk.length));
        if (insertFragment.step() != SQLITE_DONE)
          return databaseError(database, path,
                               "storing a fragment of '" + file + "'");
        ++stats.fragmentsWritten;
      }
      storeFile.reset();
      storeFile.bind(1, file);
      storeFile.bind(2, hash);
      if (storeFile.step() != SQLITE_DONE)
        return databaseError(database, path,
                             "storing the hash of '" + file + "'");
    }

    // Files in the index but no longer in the folder: sorted, for a
    // deterministic order of deletes.
    std::vector<std::string> removed;
    for (const auto &entry : knownHashes)
      if (!present.count(entry.getKey()))
        removed.push_back(entry.getKey().str());
    llvm::sort(removed);
    for (const std::string &file : removed) {
      if (llvm::Error error = dropFragments(file))
        return error;
      deleteFile.reset();
      deleteFile.bind(1, file);
      if (deleteFile.step() != SQLITE_DONE)
        return databaseError(database, path, "removing '" + file + "'");
      ++stats.filesRemoved;
    }
    if (stopRequested && stopRequested())
      return interrupted();
    stats.fragmentsTotal = static_cast<unsigned>(fragments);
    if (llvm::Error error = transaction.commit())
      return error;
    // Deleted rows leave free pages and FTS5 delete markers behind: a
    // corpus that lost a large file would keep its size for good. Once a
    // quarter of the fragments went, merge the search index's segments
    // and rewrite the file (both cost a pass over the index).
    compact = !isInMemory() && droppedFragments > 0 &&
              droppedFragments * 4 >= fragmentsBefore;
  }
  if (compact) {
    // Best effort: another process reading the index makes VACUUM fail,
    // and the next refresh tries again.
    sqlite3_exec(database,
                 "INSERT INTO fragment_search(fragment_search) "
                 "VALUES('optimize')",
                 nullptr, nullptr, nullptr);
    stats.compacted = sqlite3_exec(database, "VACUUM", nullptr, nullptr,
                                   nullptr) == SQLITE_OK;
  }
  return stats;
}

llvm::Expected<std::vector<Fragment>>
CorpusIndex::retrieve(llvm::StringRef query, unsigned k) const {
  std::vector<Fragment> fragments;
  std::string match = toMatchExpression(query);
  if (match.empty() || k == 0)
    return fragments;
  Statement select;
  if (llvm::Error error = prepare(
          database, path, select,
          "SELECT f.path, f.offset, f.length, f.body, bm25(fragment_search) "
          "AS rank FROM fragment_search JOIN fragments f "
          "ON f.id = fragment_search.rowid WHERE fragment_search MATCH ?1 "
          "ORDER BY rank, f.path, f.offset LIMIT ?2"))
    return error;
  select.bind(1, match);
  select.bind(2, static_cast<int64_t>(k));
  int rc;
  while ((rc = select.step()) == SQLITE_ROW) {
    Fragment fragment;
    fragment.path = select.text(0).str();
    fragment.offset = static_cast<uint64_t>(select.integer(1));
    fragment.length = static_cast<uint64_t>(select.integer(2));
    fragment.text = select.text(3).str();
    fragment.score = -select.real(4);
    fragments.push_back(std::move(fragment));
  }
  if (rc != SQLITE_DONE)
    return databaseError(database, path, "searching for '" + query + "'");
  return fragments;
}

std::string toMatchExpression(llvm::StringRef text, unsigned maxTerms) {
  auto isWordByte = [](char c) {
    return llvm::isAlnum(c) || static_cast<unsigned char>(c) >= 0x80;
  };
  std::string expression;
  llvm::StringSet<> seen;
  size_t position = 0;
  while (position < text.size() && seen.size() < maxTerms) {
    while (position < text.size() && !isWordByte(text[position]))
      ++position;
    size_t start = position;
    while (position < text.size() && isWordByte(text[position]))
      ++position;
    if (start == position)
      break;
    std::string word = text.slice(start, position).lower();
    if (!seen.insert(word).second)
      continue;
    // A word holds no '"' (nor any other FTS5 operator character), so
    // quoting it makes a phrase that can never be a syntax error.
    if (!expression.empty())
      expression += " OR ";
    expression += '"';
    expression += word;
    expression += '"';
  }
  return expression;
}

} // namespace spanc::retrieval
