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

/// The corpus files under `directory`, relative and sorted. Hidden entries
/// (the index itself, .git) are skipped; symbolic links to files are
/// followed, links to folders are not (no cycles).
llvm::Expected<std::vector<std::string>>
listCorpusFiles(llvm::StringRef directory) {
  std::vector<std::string> files;
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
      llvm::sys::fs::file_status status;
      if (llvm::sys::fs::status(entryPath, status, /*Follow=*/true))
        continue; // A dangling link is not a corpus file.
      type = status.type();
    }
    if (type != llvm::sys::fs::file_type::regular_file)
      continue;
    llvm::StringRef relative = entryPath.drop_front(directory.size());
    relative = relative.ltrim(llvm::sys::path::get_separator());
    files.push_back(relative.str());
  }
  if (ec)
    return makeError("cannot list corpus '" + directory + "': " + ec.message());
  llvm::sort(files);
  return files;
}

} // namespace

CorpusIndex::CorpusIndex(std::string directory, std::string path,
                         sqlite3 *database, ChunkOptions chunking)
    : directory(std::move(directory)), path(std::move(path)),
      database(database), chunking(chunking) {}

CorpusIndex::~CorpusIndex() { sqlite3_close(database); }

llvm::Expected<std::unique_ptr<CorpusIndex>>
CorpusIndex::open(llvm::StringRef corpusDir, const ChunkOptions &chunking) {
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(corpusDir, status)) {
    if (ec == std::errc::no_such_file_or_directory)
      return makeError("corpus '" + corpusDir + "' does not exist");
    return makeError("cannot access corpus '" + corpusDir +
                     "': " + ec.message());
  }
  if (status.type() != llvm::sys::fs::file_type::directory_file)
    return makeError("corpus '" + corpusDir + "' is not a folder");

  llvm::SmallString<256> indexFile(corpusDir);
  llvm::sys::path::append(indexFile, IndexFileName);
  bool writable =
      !llvm::sys::fs::access(corpusDir, llvm::sys::fs::AccessMode::Write);
  std::string path = writable ? std::string(indexFile) : ":memory:";

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
    std::unique_ptr<CorpusIndex> index(
        new CorpusIndex(corpusDir.str(), path, database, chunking));
    llvm::Error error = ensureSchema(database, path, chunking);
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

llvm::Expected<RefreshStats> CorpusIndex::refresh() {
  llvm::Expected<std::vector<std::string>> files = listCorpusFiles(directory);
  if (!files)
    return files.takeError();

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
    return llvm::Error::success();
  };

  RefreshStats stats;
  llvm::StringSet<> present;
  for (const std::string &file : *files) {
    present.insert(file);
    llvm::SmallString<256> fullPath(directory);
    llvm::sys::path::append(fullPath, file);
    // Hashing every file costs a read of the corpus, but unlike size and
    // mtime a content hash never misses an edit.
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
        llvm::MemoryBuffer::getFile(fullPath, /*IsText=*/false,
                                    /*RequiresNullTerminator=*/false);
    if (!buffer)
      return makeError("cannot read corpus file '" + fullPath +
                       "': " + buffer.getError().message());
    llvm::StringRef content = (*buffer)->getBuffer();
    std::string hash =
        llvm::toHex(llvm::SHA1::hash(llvm::arrayRefFromStringRef(content)),
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
    for (const Chunk &chunk : chunkText(content, chunking)) {
      insertFragment.reset();
      insertFragment.bind(1, file);
      insertFragment.bind(2, static_cast<int64_t>(chunk.offset));
      insertFragment.bind(3, static_cast<int64_t>(chunk.length));
      insertFragment.bind(4, content.substr(chunk.offset, chunk.length));
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

  Statement count;
  if (llvm::Error error =
          prepare(database, path, count, "SELECT count(*) FROM fragments"))
    return error;
  if (count.step() != SQLITE_ROW)
    return databaseError(database, path, "counting fragments");
  stats.fragmentsTotal = static_cast<unsigned>(count.integer(0));
  if (llvm::Error error = transaction.commit())
    return error;
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
