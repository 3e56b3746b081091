//===- CorpusIndexTest.cpp - Tests of the FTS5 corpus index ---------------===//

#include "retrieval/CorpusIndex.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>
#include <sstream>
#include <unistd.h>

using namespace spanc::retrieval;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

/// A temporary corpus folder, removed with everything in it.
class TempCorpus {
public:
  TempCorpus() {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("spanc-corpus", directory);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempCorpus() { llvm::sys::fs::remove_directories(directory); }

  std::string path() const { return std::string(directory); }

  void write(llvm::StringRef relative, llvm::StringRef content) {
    llvm::SmallString<128> file(directory);
    llvm::sys::path::append(file, relative);
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(file));
    std::error_code ec;
    llvm::raw_fd_ostream out(file, ec);
    ASSERT_FALSE(ec) << ec.message();
    out << content;
  }
  void remove(llvm::StringRef relative) {
    llvm::SmallString<128> file(directory);
    llvm::sys::path::append(file, relative);
    ASSERT_FALSE(llvm::sys::fs::remove(file));
  }

private:
  llvm::SmallString<128> directory;
};

std::unique_ptr<CorpusIndex> openIndex(const std::string &directory,
                                       const ChunkOptions &options = {}) {
  auto index = CorpusIndex::open(directory, options);
  if (!index) {
    ADD_FAILURE() << llvm::toString(index.takeError());
    return nullptr;
  }
  return std::move(*index);
}

RefreshStats refresh(CorpusIndex &index) {
  auto stats = index.refresh();
  if (!stats) {
    ADD_FAILURE() << llvm::toString(stats.takeError());
    return {};
  }
  return *stats;
}

std::vector<Fragment> retrieve(const CorpusIndex &index, llvm::StringRef query,
                               unsigned k) {
  auto fragments = index.retrieve(query, k);
  if (!fragments) {
    ADD_FAILURE() << llvm::toString(fragments.takeError());
    return {};
  }
  return *fragments;
}

std::vector<std::string> pathsOf(const std::vector<Fragment> &fragments) {
  std::vector<std::string> paths;
  for (const Fragment &fragment : fragments)
    paths.push_back(fragment.path + "@" + std::to_string(fragment.offset));
  return paths;
}

std::string paragraph(const std::string &topic) {
  return "This paragraph is about " + topic + ". It says more about " + topic +
         " than about anything else, because " + topic + " matters here.";
}

TEST(CorpusIndex, RanksTheFragmentThatMatchesBestFirst) {
  TempCorpus corpus;
  corpus.write("pool.md",
               paragraph("eviction") + "\n\n" + paragraph("refcounts"));
  corpus.write("rope.txt", paragraph("rotation"));
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.filesAdded, 2u);
  EXPECT_EQ(stats.fragmentsTotal, 3u);

  auto fragments = retrieve(*index, "How does rotation work?", 2);
  ASSERT_GE(fragments.size(), 1u);
  EXPECT_EQ(fragments[0].path, "rope.txt");
  EXPECT_EQ(fragments[0].offset, 0u);
  EXPECT_EQ(fragments[0].text, paragraph("rotation"));
  // Best first.
  for (size_t i = 1; i < fragments.size(); ++i)
    EXPECT_GE(fragments[i - 1].score, fragments[i].score);

  auto refcounts = retrieve(*index, "refcounts", 5);
  ASSERT_EQ(refcounts.size(), 1u);
  EXPECT_EQ(refcounts[0].path, "pool.md");
  std::string file = paragraph("eviction") + "\n\n" + paragraph("refcounts");
  EXPECT_EQ(file.substr(refcounts[0].offset, refcounts[0].length),
            refcounts[0].text);
}

// BM25 as FTS5 defines it (k1 = 1.2, b = 0.75, idf clamped to 1e-6 when not
// positive), computed here independently over whitespace-separated words.
double referenceBm25(const std::vector<std::vector<std::string>> &documents,
                     size_t document, const std::vector<std::string> &terms) {
  double averageLength = 0;
  for (const auto &words : documents)
    averageLength += words.size();
  averageLength /= documents.size();
  double score = 0;
  for (const std::string &term : terms) {
    double containing = 0;
    for (const auto &words : documents)
      containing += std::count(words.begin(), words.end(), term) > 0;
    double idf =
        std::log((documents.size() - containing + 0.5) / (containing + 0.5));
    if (idf <= 0)
      idf = 1e-6;
    const auto &words = documents[document];
    double frequency = std::count(words.begin(), words.end(), term);
    score += idf * frequency * 2.2 /
             (frequency + 1.2 * (0.25 + 0.75 * words.size() / averageLength));
  }
  return score;
}

TEST(CorpusIndex, ScoresAreFts5Bm25) {
  // Words the Porter stemmer leaves alone, one paragraph per document.
  std::vector<std::vector<std::string>> documents = {
      {"cat", "dog", "cat", "fish"},
      {"dog", "bird"},
      {"fish", "fish", "fish", "cat", "bird", "bird", "dog"},
      {"cow", "bird"},
      {"cow", "cow", "horse"}};
  std::string text;
  for (const auto &words : documents) {
    for (const std::string &word : words)
      text += word + " ";
    text += "\n\n";
  }
  TempCorpus corpus;
  corpus.write("animals.txt", text);
  ChunkOptions options;
  options.minBytes = 0; // Every paragraph its own fragment.
  auto index = openIndex(corpus.path(), options);
  ASSERT_TRUE(index);
  EXPECT_EQ(refresh(*index).fragmentsTotal, documents.size());

  for (std::vector<std::string> terms :
       {std::vector<std::string>{"cat"}, {"fish", "cow"}, {"horse", "bird"}}) {
    std::string query;
    for (const std::string &term : terms)
      query += term + " ";
    auto fragments = retrieve(*index, query, 10);
    ASSERT_FALSE(fragments.empty());
    double previous = INFINITY;
    for (const Fragment &fragment : fragments) {
      // Recover which document this is from its offset.
      size_t document =
          std::count(text.begin(), text.begin() + fragment.offset, '\n') / 2;
      ASSERT_LT(document, documents.size());
      EXPECT_NEAR(fragment.score, referenceBm25(documents, document, terms),
                  1e-9)
          << "query '" << query << "', document " << document;
      EXPECT_LE(fragment.score, previous);
      previous = fragment.score;
    }
  }
}

TEST(CorpusIndex, EqualScoresAreOrderedByPathThenOffset) {
  TempCorpus corpus;
  std::string same = paragraph("tiebreak");
  corpus.write("b.md", same + "\n\n" + paragraph("other") + "\n\n" + same);
  corpus.write("a.md", same);
  corpus.write("c/d.txt", same);
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  refresh(*index);
  size_t second = (same + "\n\n" + paragraph("other") + "\n\n").size();
  EXPECT_THAT(pathsOf(retrieve(*index, "tiebreak", 10)),
              ElementsAre("a.md@0", "b.md@0", "b.md@" + std::to_string(second),
                          "c/d.txt@0"));
  // And k cuts that order.
  EXPECT_THAT(pathsOf(retrieve(*index, "tiebreak", 2)),
              ElementsAre("a.md@0", "b.md@0"));
}

TEST(CorpusIndex, RefreshReindexesOnlyChangedFiles) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("apples"));
  corpus.write("two.md", paragraph("pears"));
  corpus.write("three.md", paragraph("plums"));
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  refresh(*index);

  RefreshStats again = refresh(*index);
  EXPECT_EQ(again.filesUnchanged, 3u);
  EXPECT_EQ(again.fragmentsWritten, 0u);

  corpus.write("two.md", paragraph("cherries"));
  corpus.remove("three.md");
  corpus.write("four.md", paragraph("grapes"));
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.filesAdded, 1u);
  EXPECT_EQ(stats.filesChanged, 1u);
  EXPECT_EQ(stats.filesUnchanged, 1u);
  EXPECT_EQ(stats.filesRemoved, 1u);
  EXPECT_EQ(stats.fragmentsWritten, 2u);
  EXPECT_EQ(stats.fragmentsTotal, 3u);

  EXPECT_TRUE(retrieve(*index, "pears", 5).empty());
  EXPECT_TRUE(retrieve(*index, "plums", 5).empty());
  EXPECT_THAT(pathsOf(retrieve(*index, "cherries", 5)),
              ElementsAre("two.md@0"));
  EXPECT_THAT(pathsOf(retrieve(*index, "grapes", 5)), ElementsAre("four.md@0"));
}

TEST(CorpusIndex, IndexFilePersistsBesideTheCorpus) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("persistence"));
  {
    auto index = openIndex(corpus.path());
    ASSERT_TRUE(index);
    EXPECT_FALSE(index->isInMemory());
    refresh(*index);
  }
  llvm::SmallString<128> file(corpus.path());
  llvm::sys::path::append(file, IndexFileName);
  EXPECT_TRUE(llvm::sys::fs::exists(file));
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  EXPECT_EQ(index->indexPath(), file.str());
  // Found without re-chunking anything.
  EXPECT_THAT(pathsOf(retrieve(*index, "persistence", 5)),
              ElementsAre("one.md@0"));
  EXPECT_EQ(refresh(*index).filesUnchanged, 1u);
}

TEST(CorpusIndex, OtherChunkOptionsRebuildTheIndex) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("first") + "\n\n" + paragraph("second"));
  {
    auto index = openIndex(corpus.path());
    ASSERT_TRUE(index);
    EXPECT_EQ(refresh(*index).fragmentsTotal, 2u);
  }
  ChunkOptions options;
  options.minBytes = 1000; // Joins both paragraphs.
  auto index = openIndex(corpus.path(), options);
  ASSERT_TRUE(index);
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.filesAdded, 1u);
  EXPECT_EQ(stats.fragmentsTotal, 1u);
}

TEST(CorpusIndex, DamagedIndexFileIsRebuilt) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("recovery"));
  corpus.write(IndexFileName,
               "this is not an SQLite database, not at all....."
               "................................................");
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  EXPECT_EQ(refresh(*index).filesAdded, 1u);
  EXPECT_THAT(pathsOf(retrieve(*index, "recovery", 5)),
              ElementsAre("one.md@0"));
}

TEST(CorpusIndex, OnlyVisibleTextAndMarkdownFilesAreIndexed) {
  TempCorpus corpus;
  corpus.write("kept.MD", paragraph("visible"));
  corpus.write("sub/deeper/kept.txt", paragraph("visible"));
  corpus.write("skipped.json", paragraph("visible"));
  corpus.write(".hidden.md", paragraph("visible"));
  corpus.write(".git/notes.md", paragraph("visible"));
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  refresh(*index);
  EXPECT_THAT(pathsOf(retrieve(*index, "visible", 10)),
              ElementsAre("kept.MD@0", "sub/deeper/kept.txt@0"));
}

TEST(CorpusIndex, AnyQueryTextIsSafe) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("near") + "\n\n" + paragraph("stars"));
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  refresh(*index);
  for (const char *query :
       {"\"", "\"\"", "NEAR(", "a AND", "OR", "NOT x", "*", "^start", "col:x",
        "(((", "{x y}:z", "'; DROP TABLE fragments; --", "\xFF\xFE", "-", "+",
        "near\" OR \"stars"}) {
    auto fragments = index->retrieve(query, 3);
    EXPECT_TRUE(static_cast<bool>(fragments))
        << query << ": " << llvm::toString(fragments.takeError());
  }
  // Operator words are plain words: "near" finds the paragraph about it.
  auto near = retrieve(*index, "NEAR(", 1);
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(near[0].offset, 0u);
  EXPECT_TRUE(retrieve(*index, "?!", 3).empty());
  EXPECT_TRUE(retrieve(*index, "stars", 0).empty());
}

TEST(CorpusIndex, MatchExpressionQuotesDeduplicatedLowerCaseWords) {
  EXPECT_EQ(toMatchExpression("What does the Pool do? the pool!"),
            "\"what\" OR \"does\" OR \"the\" OR \"pool\" OR \"do\"");
  EXPECT_EQ(toMatchExpression("\"x\" AND y*"), "\"x\" OR \"and\" OR \"y\"");
  EXPECT_EQ(toMatchExpression("caf\xC3\xA9-au-lait"),
            "\"caf\xC3\xA9\" OR \"au\" OR \"lait\"");
  EXPECT_EQ(toMatchExpression(" ?! "), "");
  EXPECT_EQ(toMatchExpression("a b c d", 2), "\"a\" OR \"b\"");
}

TEST(CorpusIndex, MissingCorpusIsAClearError) {
  auto index = CorpusIndex::open("/nonexistent/spanc-corpus");
  ASSERT_FALSE(index);
  EXPECT_EQ(llvm::toString(index.takeError()),
            "corpus '/nonexistent/spanc-corpus' does not exist");
}

TEST(CorpusIndex, FileInsteadOfFolderIsAClearError) {
  TempCorpus corpus;
  corpus.write("one.md", "x");
  auto index = CorpusIndex::open(corpus.path() + "/one.md");
  ASSERT_FALSE(index);
  EXPECT_THAT(llvm::toString(index.takeError()), HasSubstr("is not a folder"));
}

TEST(CorpusIndex, UnreadableFileIsAnErrorNamingIt) {
  if (geteuid() == 0)
    GTEST_SKIP() << "running as root: file permissions do not apply";
  TempCorpus corpus;
  corpus.write("locked.md", paragraph("secret"));
  llvm::sys::fs::setPermissions(corpus.path() + "/locked.md",
                                llvm::sys::fs::no_perms);
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  auto stats = index->refresh();
  ASSERT_FALSE(stats);
  EXPECT_THAT(llvm::toString(stats.takeError()),
              HasSubstr("cannot read corpus file"));
}

TEST(CorpusIndex, ReadOnlyCorpusIsIndexedInMemory) {
  if (geteuid() == 0)
    GTEST_SKIP() << "running as root: file permissions do not apply";
  TempCorpus corpus;
  corpus.write("one.md", paragraph("readonly"));
  llvm::sys::fs::setPermissions(corpus.path(), llvm::sys::fs::owner_read |
                                                   llvm::sys::fs::owner_exe);
  auto index = openIndex(corpus.path());
  ASSERT_TRUE(index);
  EXPECT_TRUE(index->isInMemory());
  refresh(*index);
  EXPECT_THAT(pathsOf(retrieve(*index, "readonly", 5)),
              ElementsAre("one.md@0"));
  llvm::sys::fs::setPermissions(corpus.path(), llvm::sys::fs::all_perms);
}

} // namespace
