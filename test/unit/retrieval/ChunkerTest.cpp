//===- ChunkerTest.cpp - Tests of corpus chunking -------------------------===//

#include "retrieval/Chunker.h"

#include "llvm/ADT/ArrayRef.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <random>
#include <string>

using namespace spanc::retrieval;
using ::testing::ElementsAre;

namespace {

std::string textOf(llvm::StringRef text, const Chunk &chunk) {
  return text.substr(chunk.offset, chunk.length).str();
}

std::string repeatWord(const std::string &word, int times) {
  std::string out;
  for (int i = 0; i < times; ++i)
    out += (i ? " " : "") + word;
  return out;
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' ||
         c == '\v';
}

/// Checks what every chunking must satisfy, whatever the text.
void expectWellFormed(llvm::StringRef text, llvm::ArrayRef<Chunk> chunks,
                      const ChunkOptions &options) {
  std::vector<bool> covered(text.size(), false);
  size_t previousOffset = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk &chunk = chunks[i];
    ASSERT_GT(chunk.length, 0u);
    ASSERT_LE(chunk.offset + chunk.length, text.size());
    EXPECT_LE(chunk.length, options.maxBytes);
    EXPECT_FALSE(isSpace(text[chunk.offset]));
    EXPECT_FALSE(isSpace(text[chunk.offset + chunk.length - 1]));
    // Never starts inside a UTF-8 sequence.
    EXPECT_NE(static_cast<unsigned char>(text[chunk.offset]) & 0xC0, 0x80);
    if (i) {
      EXPECT_GT(chunk.offset, previousOffset);
    }
    previousOffset = chunk.offset;
    for (size_t j = chunk.offset; j < chunk.offset + chunk.length; ++j)
      covered[j] = true;
  }
  // Nothing visible is lost.
  for (size_t j = 0; j < text.size(); ++j)
    if (!isSpace(text[j])) {
      EXPECT_TRUE(covered[j]) << "byte " << j << " is in no fragment";
    }
}

TEST(Chunker, OneFragmentPerParagraphAtItsByteOffset) {
  std::string first = repeatWord("alpha", 20);
  std::string second = repeatWord("beta", 25);
  std::string text = "\n  " + first + "  \n\n \t\n" + second + "\n";
  auto chunks = chunkText(text);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].offset, 3u);
  EXPECT_EQ(textOf(text, chunks[0]), first);
  EXPECT_EQ(chunks[1].offset, text.find("beta"));
  EXPECT_EQ(textOf(text, chunks[1]), second);
}

TEST(Chunker, LinesOfOneParagraphStayTogether) {
  std::string text = repeatWord("one", 30) + "\n" + repeatWord("two", 30);
  auto chunks = chunkText(text);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(textOf(text, chunks[0]), text);
}

TEST(Chunker, CarriageReturnBlankLinesSeparateParagraphs) {
  std::string first = repeatWord("alpha", 20);
  std::string second = repeatWord("beta", 25);
  std::string text = first + "\r\n\r\n" + second + "\r\n";
  auto chunks = chunkText(text);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(textOf(text, chunks[0]), first);
  EXPECT_EQ(textOf(text, chunks[1]), second);
}

TEST(Chunker, ShortHeadingJoinsTheParagraphAfterIt) {
  std::string body = repeatWord("gamma", 30);
  std::string text = "# Title\n\n" + body + "\n\n" + repeatWord("delta", 30);
  auto chunks = chunkText(text);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(textOf(text, chunks[0]), "# Title\n\n" + body);
}

TEST(Chunker, ShortLastParagraphJoinsTheOneBeforeIt) {
  std::string body = repeatWord("gamma", 30);
  std::string text = body + "\n\nThanks.\n";
  auto chunks = chunkText(text);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(textOf(text, chunks[0]), body + "\n\nThanks.");
}

TEST(Chunker, ShortParagraphsDoNotJoinPastTheCap) {
  ChunkOptions options;
  options.maxBytes = 40;
  options.overlapBytes = 8;
  options.minBytes = 20;
  std::string text = "aaaa bbbb\n\ncccc dddd eeee ffff gggg hhhh iiii";
  auto chunks = chunkText(text, options);
  // Joined the pair would be 40+ bytes; the heading stays alone.
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(textOf(text, chunks[0]), "aaaa bbbb");
}

TEST(Chunker, LongParagraphIsCutIntoOverlappingWindowsAtWords) {
  ChunkOptions options;
  options.maxBytes = 100;
  options.overlapBytes = 20;
  // Words of 9 letters and a space: cuts can only fall on spaces.
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += (i ? " word" : "word") + std::to_string(1000 + i);
  auto chunks = chunkText(text, options);
  ASSERT_GE(chunks.size(), 5u);
  expectWellFormed(text, chunks, options);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    size_t end = chunks[i].offset + chunks[i].length;
    // Consecutive windows share text, about overlapBytes of it.
    EXPECT_LT(chunks[i + 1].offset, end);
    EXPECT_GE(chunks[i + 1].offset + options.overlapBytes, end);
    // Whole words only.
    EXPECT_EQ(text[chunks[i + 1].offset - 1], ' ');
    EXPECT_TRUE(end == text.size() || text[end] == ' ');
  }
  EXPECT_EQ(chunks.back().offset + chunks.back().length, text.size());
}

TEST(Chunker, HugeWordIsCutAtCharacterBoundaries) {
  ChunkOptions options;
  options.maxBytes = 64;
  options.overlapBytes = 10;
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "\xC3\xA9"; // 'é', two bytes, no whitespace anywhere.
  auto chunks = chunkText(text, options);
  ASSERT_GE(chunks.size(), 4u);
  expectWellFormed(text, chunks, options);
  for (const Chunk &chunk : chunks)
    EXPECT_EQ(chunk.length % 2, 0u) << "a cut split a character";
}

TEST(Chunker, BlankTextHasNoFragments) {
  EXPECT_THAT(chunkText(""), ElementsAre());
  EXPECT_THAT(chunkText(" \n\t\r\n\n  "), ElementsAre());
}

TEST(Chunker, RandomTextsAreChunkedWellFormed) {
  std::mt19937 random(1234);
  const char *pieces[] = {"a",          "word",   " ",  "\n",
                          "\n\n",       "\t",     "\r", "\xE2\x82\xAC",
                          "longerword", "  \n \n"};
  for (int round = 0; round < 300; ++round) {
    ChunkOptions options;
    options.maxBytes = 16 + random() % 200;
    options.overlapBytes = random() % (options.maxBytes / 2);
    options.minBytes = random() % 100;
    std::string text;
    int length = random() % 400;
    for (int i = 0; i < length; ++i)
      text += pieces[random() % std::size(pieces)];
    SCOPED_TRACE("round " + std::to_string(round));
    expectWellFormed(text, chunkText(text, options), options);
  }
}

TEST(Chunker, OptionsDescribeThemselves) {
  ChunkOptions options;
  options.maxBytes = 500;
  options.overlapBytes = 50;
  options.minBytes = 10;
  EXPECT_EQ(options.describe(), "max=500,overlap=50,min=10");
}

} // namespace
