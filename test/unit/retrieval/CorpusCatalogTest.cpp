//===- CorpusCatalogTest.cpp - spanc serve's named corpora ----------------===//

#include "retrieval/CorpusCatalog.h"

#include "gtest/gtest.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <thread>

using namespace spanc::retrieval;

namespace {

/// A temporary folder, removed with everything in it.
struct TempFolder {
  llvm::SmallString<128> path;
  explicit TempFolder(const char *prefix) {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory(prefix, path));
  }
  ~TempFolder() { llvm::sys::fs::remove_directories(path); }
  std::string str() const { return std::string(path); }
  void write(llvm::StringRef name, llvm::StringRef content) const {
    std::error_code code;
    llvm::raw_fd_ostream out((path + "/" + name).str(), code);
    ASSERT_FALSE(code) << code.message();
    out << content;
  }
};

std::string errorOf(llvm::Error error) {
  return llvm::toString(std::move(error));
}

} // namespace

TEST(CorpusCatalog, TheFlagIsASafeNameAndAFolder) {
  auto parsed = parseCorpusFlag("kb-1.v2=/srv/docs=old");
  ASSERT_TRUE(bool(parsed)) << errorOf(parsed.takeError());
  EXPECT_EQ(parsed->first, "kb-1.v2");
  EXPECT_EQ(parsed->second, "/srv/docs=old");
  for (const char *bad :
       {"kb", "=dir", "kb=", "../x=dir", ".hidden=dir", "a b=dir", "a/b=dir"})
    EXPECT_FALSE(bool(parseCorpusFlag(bad))) << bad;
  EXPECT_NE(errorOf(parseCorpusFlag("a/b=dir").takeError())
                .find("--corpus name 'a/b' must be letters, digits"),
            std::string::npos);
}

TEST(CorpusCatalog, IndexesEachCorpusAtOpenAndSearchesItByName) {
  TempFolder docs("catalog-docs"), notes("catalog-notes"),
      indexes("catalog-index");
  docs.write("pool.md", "The block pool evicts the least recently used "
                        "block when it is full.\n");
  notes.write("rope.txt", "Rotary embeddings rotate keys by position.\n");
  IndexOptions options;
  options.indexDirectory = indexes.str();
  auto catalog = CorpusCatalog::open(
      {{"docs", docs.str()}, {"notes", notes.str()}}, options);
  ASSERT_TRUE(bool(catalog)) << errorOf(catalog.takeError());
  EXPECT_EQ((*catalog)->names(), "docs, notes");
  ASSERT_TRUE((*catalog)->find("docs"));
  EXPECT_EQ((*catalog)->find("docs")->stats.fragmentsTotal, 1u);
  EXPECT_FALSE((*catalog)->find("pool.md"));

  auto fragments = (*catalog)->retrieve("notes", "rotate keys", 3);
  ASSERT_TRUE(bool(fragments)) << errorOf(fragments.takeError());
  ASSERT_EQ(fragments->size(), 1u);
  EXPECT_EQ((*fragments)[0].path, "rope.txt");
  // The corpora are apart: docs has nothing on rotation.
  auto none = (*catalog)->retrieve("docs", "rotate", 3);
  ASSERT_TRUE(bool(none));
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(bool((*catalog)->retrieve("other", "x", 1)));

  // HTTP threads search at once; they take turns on the connection.
  std::vector<std::thread> threads;
  std::atomic<int> found{0};
  for (int thread = 0; thread < 8; ++thread)
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        auto result = (*catalog)->retrieve("docs", "pool evicts", 1);
        if (result && result->size() == 1)
          ++found;
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(found.load(), 160);
}

TEST(CorpusCatalog, WrongFoldersAndRepeatedNamesAreErrorsNamingThem) {
  TempFolder docs("catalog-docs");
  docs.write("a.md", "text\n");
  IndexOptions options;
  options.inMemory = true;
  EXPECT_NE(
      errorOf(CorpusCatalog::open({{"kb", docs.str() + "/missing"}}, options)
                  .takeError())
          .find("--corpus kb=" + docs.str() + "/missing: no such folder"),
      std::string::npos);
  EXPECT_NE(errorOf(CorpusCatalog::open({{"kb", docs.str() + "/a.md"}}, options)
                        .takeError())
                .find("not a folder"),
            std::string::npos);
  EXPECT_NE(errorOf(CorpusCatalog::open(
                        {{"kb", docs.str()}, {"kb", docs.str()}}, options)
                        .takeError())
                .find("--corpus kb is given twice"),
            std::string::npos);
}

TEST(CorpusCatalog, ALinkOutOfTheCorpusIsNotFollowedWhateverThePolicySays) {
  TempFolder docs("catalog-docs"), secret("catalog-secret");
  secret.write("secret.txt", "password hunter2\n");
  docs.write("public.md", "public words\n");
  ASSERT_FALSE(llvm::sys::fs::create_link(secret.str() + "/secret.txt",
                                          docs.str() + "/leak.txt"));
  IndexOptions options;
  options.inMemory = true;
  // A root the server's own command line allowed elsewhere must not widen
  // a corpus.
  options.readPolicy.roots = {secret.str()};
  auto catalog = CorpusCatalog::open({{"kb", docs.str()}}, options);
  ASSERT_TRUE(bool(catalog)) << errorOf(catalog.takeError());
  EXPECT_EQ((*catalog)->find("kb")->stats.linksSkipped, 1u);
  auto fragments = (*catalog)->retrieve("kb", "password hunter2", 5);
  ASSERT_TRUE(bool(fragments));
  EXPECT_TRUE(fragments->empty());
}
