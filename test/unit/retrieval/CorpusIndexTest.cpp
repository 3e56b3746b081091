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

/// A temporary corpus folder and a folder for its index, removed with
/// everything in them.
class TempCorpus {
public:
  TempCorpus() {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("spanc-corpus", directory);
    EXPECT_FALSE(ec) << ec.message();
    ec = llvm::sys::fs::createUniqueDirectory("spanc-indexes", indexes);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempCorpus() {
    llvm::sys::fs::remove_directories(directory);
    llvm::sys::fs::remove_directories(indexes);
  }

  std::string path() const { return std::string(directory); }
  std::string indexFolder() const { return std::string(indexes); }
  /// Index options that keep the index in this corpus's index folder.
  IndexOptions options(const ChunkOptions &chunking = {}) const {
    IndexOptions options;
    options.chunking = chunking;
    options.indexDirectory = indexFolder();
    return options;
  }

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
  llvm::SmallString<128> indexes;
};

std::unique_ptr<CorpusIndex> openIndex(const std::string &directory,
                                       const IndexOptions &options) {
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
  auto index = openIndex(corpus.path(), corpus.options());
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
  auto index = openIndex(corpus.path(), corpus.options(options));
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
  auto index = openIndex(corpus.path(), corpus.options());
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
  auto index = openIndex(corpus.path(), corpus.options());
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

TEST(CorpusIndex, IndexFilePersistsInTheIndexFolderNeverInTheCorpus) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("persistence"));
  std::string indexPath;
  {
    auto index = openIndex(corpus.path(), corpus.options());
    ASSERT_TRUE(index);
    EXPECT_FALSE(index->isInMemory());
    refresh(*index);
    indexPath = index->indexPath().str();
  }
  // One file in the index folder, named after the corpus folder; nothing
  // new in the corpus.
  EXPECT_EQ(llvm::sys::path::parent_path(indexPath), corpus.indexFolder());
  EXPECT_TRUE(llvm::StringRef(indexPath).endswith(".sqlite"));
  EXPECT_TRUE(llvm::sys::path::filename(indexPath).startswith(
      llvm::sys::path::filename(corpus.path())))
      << indexPath;
  EXPECT_TRUE(llvm::sys::fs::exists(indexPath));
  std::error_code ec;
  unsigned entries = 0;
  for (llvm::sys::fs::directory_iterator it(corpus.path(), ec), end;
       !ec && it != end; it.increment(ec))
    ++entries;
  EXPECT_EQ(entries, 1u);

  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  EXPECT_EQ(index->indexPath(), indexPath);
  // Found without re-chunking anything.
  EXPECT_THAT(pathsOf(retrieve(*index, "persistence", 5)),
              ElementsAre("one.md@0"));
  EXPECT_EQ(refresh(*index).filesUnchanged, 1u);
}

TEST(CorpusIndex, CorporaNamedAlikeHaveTheirOwnIndexes) {
  TempCorpus first, second;
  first.write("docs/a.md", paragraph("first"));
  second.write("docs/a.md", paragraph("second"));
  IndexOptions options = first.options();
  auto one = openIndex(first.path() + "/docs", options);
  auto other = openIndex(second.path() + "/docs", options);
  ASSERT_TRUE(one && other);
  EXPECT_NE(one->indexPath(), other->indexPath());
  refresh(*one);
  refresh(*other);
  EXPECT_EQ(retrieve(*one, "second", 5).size(), 0u);
  EXPECT_EQ(retrieve(*other, "second", 5).size(), 1u);
}

TEST(CorpusIndex, DefaultIndexFolderFollowsTheEnvironment) {
  const char *names[] = {"SPANC_INDEX_DIR", "XDG_CACHE_HOME", "HOME"};
  std::map<std::string, std::string> saved;
  for (const char *name : names)
    if (const char *value = getenv(name))
      saved[name] = value;
  setenv("HOME", "/home/someone", 1);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("SPANC_INDEX_DIR");
  EXPECT_EQ(defaultIndexDirectory(), "/home/someone/.cache/spanc/index");
  setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
  EXPECT_EQ(defaultIndexDirectory(), "/var/cache/me/spanc/index");
  setenv("SPANC_INDEX_DIR", "/srv/indexes", 1);
  EXPECT_EQ(defaultIndexDirectory(), "/srv/indexes");
  unsetenv("SPANC_INDEX_DIR");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  EXPECT_EQ(defaultIndexDirectory(), "");
  for (const char *name : names) {
    unsetenv(name);
    if (saved.count(name))
      setenv(name, saved[name].c_str(), 1);
  }
}

TEST(CorpusIndex, OtherChunkOptionsRebuildTheIndex) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("first") + "\n\n" + paragraph("second"));
  {
    auto index = openIndex(corpus.path(), corpus.options());
    ASSERT_TRUE(index);
    EXPECT_EQ(refresh(*index).fragmentsTotal, 2u);
  }
  ChunkOptions options;
  options.minBytes = 1000; // Joins both paragraphs.
  auto index = openIndex(corpus.path(), corpus.options(options));
  ASSERT_TRUE(index);
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.filesAdded, 1u);
  EXPECT_EQ(stats.fragmentsTotal, 1u);
}

TEST(CorpusIndex, DamagedIndexFileIsRebuilt) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("recovery"));
  std::string indexPath;
  {
    auto index = openIndex(corpus.path(), corpus.options());
    ASSERT_TRUE(index);
    indexPath = index->indexPath().str();
  }
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(indexPath, ec);
    ASSERT_FALSE(ec) << ec.message();
    out << "this is not an SQLite database, not at all....."
           "................................................";
  }
  auto index = openIndex(corpus.path(), corpus.options());
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
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  refresh(*index);
  EXPECT_THAT(pathsOf(retrieve(*index, "visible", 10)),
              ElementsAre("kept.MD@0", "sub/deeper/kept.txt@0"));
}

TEST(CorpusIndex, AnyQueryTextIsSafe) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("near") + "\n\n" + paragraph("stars"));
  auto index = openIndex(corpus.path(), corpus.options());
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
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  auto stats = index->refresh();
  ASSERT_FALSE(stats);
  EXPECT_THAT(llvm::toString(stats.takeError()),
              HasSubstr("cannot read corpus file"));
}

TEST(CorpusIndex, ReadOnlyCorpusIsIndexed) {
  if (geteuid() == 0)
    GTEST_SKIP() << "running as root: file permissions do not apply";
  TempCorpus corpus;
  corpus.write("one.md", paragraph("readonly"));
  llvm::sys::fs::setPermissions(corpus.path(), llvm::sys::fs::owner_read |
                                                   llvm::sys::fs::owner_exe);
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  EXPECT_FALSE(index->isInMemory());
  refresh(*index);
  EXPECT_THAT(pathsOf(retrieve(*index, "readonly", 5)),
              ElementsAre("one.md@0"));
  llvm::sys::fs::setPermissions(corpus.path(), llvm::sys::fs::all_perms);
}

TEST(CorpusIndex, UnwritableIndexFolderKeepsTheIndexInMemory) {
  TempCorpus corpus;
  corpus.write("one.md", paragraph("memory"));
  IndexOptions options = corpus.options();
  // A file where the index folder should be: it cannot be created.
  corpus.write("not-a-folder", "x");
  options.indexDirectory = corpus.path() + "/not-a-folder/indexes";
  auto index = openIndex(corpus.path(), options);
  ASSERT_TRUE(index);
  EXPECT_TRUE(index->isInMemory());
  refresh(*index);
  EXPECT_THAT(pathsOf(retrieve(*index, "memory", 5)), ElementsAre("one.md@0"));
}

TEST(CorpusIndex, LinkLeadingOutOfTheCorpusIsSkippedNeverRead) {
  TempCorpus corpus, elsewhere;
  corpus.write("kept.md", paragraph("kept"));
  elsewhere.write("secret.txt", paragraph("secret"));
  ASSERT_FALSE(llvm::sys::fs::create_link(elsewhere.path() + "/secret.txt",
                                          corpus.path() + "/leak.txt"));
  // A link inside the corpus is followed.
  ASSERT_FALSE(llvm::sys::fs::create_link(corpus.path() + "/kept.md",
                                          corpus.path() + "/alias.md"));
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.linksSkipped, 1u);
  EXPECT_EQ(stats.filesAdded, 2u);
  EXPECT_TRUE(retrieve(*index, "secret", 5).empty());
  EXPECT_THAT(pathsOf(retrieve(*index, "kept", 5)),
              ElementsAre("alias.md@0", "kept.md@0"));

  // Where the read policy allows the other folder, the link is followed.
  IndexOptions allowing = corpus.options();
  allowing.readPolicy.roots.push_back(elsewhere.path());
  allowing.inMemory = true;
  auto allowed = openIndex(corpus.path(), allowing);
  ASSERT_TRUE(allowed);
  EXPECT_EQ(refresh(*allowed).linksSkipped, 0u);
  EXPECT_THAT(pathsOf(retrieve(*allowed, "secret", 5)),
              ElementsAre("leak.txt@0"));
}

TEST(CorpusIndex, FileOverTheSizeLimitIsAnErrorNamingItAndTheOption) {
  TempCorpus corpus;
  corpus.write("small.md", paragraph("small"));
  corpus.write("large.md", paragraph("large") + std::string(2000, ' ') + "x");
  IndexOptions options = corpus.options();
  options.readPolicy.maxFileBytes = 1000;
  auto index = openIndex(corpus.path(), options);
  ASSERT_TRUE(index);
  auto stats = index->refresh();
  ASSERT_FALSE(stats);
  std::string message = llvm::toString(stats.takeError());
  EXPECT_THAT(message, HasSubstr("large.md"));
  EXPECT_THAT(message, HasSubstr("over the limit of 1000"));
  EXPECT_THAT(message, HasSubstr("--max-file-size"));
  // Nothing was indexed: the refresh is all or nothing.
  EXPECT_TRUE(retrieve(*index, "small", 5).empty());
}

TEST(CorpusIndex, BinaryFileIsNotText) {
  TempCorpus corpus;
  corpus.write("random.txt", llvm::StringRef("abc\0\x01\xff def", 11));
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  auto stats = index->refresh();
  ASSERT_FALSE(stats);
  EXPECT_THAT(llvm::toString(stats.takeError()),
              HasSubstr("random.txt' is not text (a NUL byte at offset 3)"));
}

TEST(CorpusIndex, CorpusOverTheFragmentLimitIsAnErrorAndTheIndexIsUnchanged) {
  TempCorpus corpus;
  corpus.write("a.md", paragraph("first") + "\n\n" + paragraph("second"));
  IndexOptions options = corpus.options();
  options.maxFragments = 3;
  auto index = openIndex(corpus.path(), options);
  ASSERT_TRUE(index);
  EXPECT_EQ(refresh(*index).fragmentsTotal, 2u);
  corpus.write("b.md", paragraph("third") + "\n\n" + paragraph("fourth"));
  auto stats = index->refresh();
  ASSERT_FALSE(stats);
  EXPECT_THAT(llvm::toString(stats.takeError()),
              HasSubstr("more than 3 fragments (at 'b.md'); raise the limit "
                        "with --max-corpus-fragments"));
  EXPECT_THAT(
      pathsOf(retrieve(*index, "first second third fourth", 5)),
      ElementsAre("a.md@0",
                  "a.md@" + std::to_string(paragraph("first").size() + 2)));
}

TEST(CorpusIndex, DeletedFilesLeaveTheIndexAndTheirSpaceIsGivenBack) {
  TempCorpus corpus;
  corpus.write("small.md", paragraph("small"));
  // Some 4 MB of distinct words in paragraphs: a large share of the index.
  std::string large;
  for (int paragraphIndex = 0; paragraphIndex < 4000; ++paragraphIndex) {
    for (int word = 0; word < 120; ++word)
      large += "w" + std::to_string(paragraphIndex * 131 + word * 7) + " ";
    large += "\n\n";
  }
  corpus.write("large.md", large);
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  refresh(*index);
  uint64_t before = 0, after = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(index->indexPath(), before));
  corpus.remove("large.md");
  RefreshStats stats = refresh(*index);
  EXPECT_EQ(stats.filesRemoved, 1u);
  EXPECT_TRUE(stats.compacted);
  ASSERT_FALSE(llvm::sys::fs::file_size(index->indexPath(), after));
  EXPECT_LT(after * 10, before) << before << " -> " << after;
  EXPECT_THAT(pathsOf(retrieve(*index, "small", 5)), ElementsAre("small.md@0"));
}

TEST(CorpusIndex, StoppedRefreshLeavesTheIndexAsItWas) {
  TempCorpus corpus;
  corpus.write("a.md", paragraph("alpha"));
  auto index = openIndex(corpus.path(), corpus.options());
  ASSERT_TRUE(index);
  refresh(*index);
  corpus.write("b.md", paragraph("beta"));
  corpus.write("c.md", paragraph("gamma"));
  corpus.remove("a.md");
  unsigned asked = 0;
  auto stats = index->refresh([&] { return ++asked == 2; });
  ASSERT_FALSE(stats);
  EXPECT_THAT(llvm::toString(stats.takeError()),
              HasSubstr("interrupted; its index is as it was"));
  EXPECT_EQ(asked, 2u);
  EXPECT_THAT(pathsOf(retrieve(*index, "alpha", 5)), ElementsAre("a.md@0"));
  EXPECT_TRUE(retrieve(*index, "beta", 5).empty());
  // And the next refresh does the whole work.
  RefreshStats again = refresh(*index);
  EXPECT_EQ(again.filesAdded, 2u);
  EXPECT_EQ(again.filesRemoved, 1u);
}

} // namespace
