//===- Chunker.cpp - Split corpus text into retrieval fragments -----------===//

#include "retrieval/Chunker.h"

#include "llvm/ADT/ArrayRef.h"

#include <cassert>

namespace spanc::retrieval {

namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' ||
         c == '\v';
}

/// A UTF-8 continuation byte (10xxxxxx): cutting before it splits a
/// character.
bool isContinuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

struct Range {
  size_t begin;
  size_t end;
  size_t size() const { return end - begin; }
};

/// Maximal runs of non-blank lines, trimmed of surrounding whitespace.
llvm::SmallVector<Range, 16> findParagraphs(llvm::StringRef text) {
  llvm::SmallVector<Range, 16> paragraphs;
  bool inParagraph = false;
  Range current{0, 0};
  size_t lineStart = 0;
  while (lineStart < text.size()) {
    size_t lineEnd = text.find('\n', lineStart);
    if (lineEnd == llvm::StringRef::npos)
      lineEnd = text.size();
    size_t first = lineStart;
    while (first < lineEnd && isSpace(text[first]))
      ++first;
    if (first == lineEnd) {
      if (inParagraph)
        paragraphs.push_back(current);
      inParagraph = false;
    } else {
      size_t last = lineEnd;
      while (isSpace(text[last - 1]))
        --last;
      if (!inParagraph)
        current.begin = first;
      current.end = last;
      inParagraph = true;
    }
    lineStart = lineEnd + 1;
  }
  if (inParagraph)
    paragraphs.push_back(current);
  return paragraphs;
}

/// Joins short paragraphs to their neighbours while the result fits.
llvm::SmallVector<Range, 16> groupParagraphs(llvm::ArrayRef<Range> paragraphs,
                                             const ChunkOptions &options) {
  llvm::SmallVector<Range, 16> groups;
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    Range group = paragraphs[i];
    while (group.size() < options.minBytes && i + 1 < paragraphs.size() &&
           paragraphs[i + 1].end - group.begin <= options.maxBytes)
      group.end = paragraphs[++i].end;
    groups.push_back(group);
  }
  // A short last paragraph (a closing line) belongs with what precedes it.
  if (groups.size() >= 2 && groups.back().size() < options.minBytes &&
      groups.back().end - groups[groups.size() - 2].begin <= options.maxBytes) {
    groups[groups.size() - 2].end = groups.back().end;
    groups.pop_back();
  }
  return groups;
}

/// Cuts `range` into windows of at most maxBytes, preferably at whitespace,
/// consecutive windows sharing about overlapBytes.
void splitLongRange(llvm::StringRef text, Range range,
                    const ChunkOptions &options,
                    llvm::SmallVectorImpl<Chunk> &chunks) {
  size_t position = range.begin;
  while (true) {
    if (range.end - position <= options.maxBytes) {
      chunks.push_back({position, range.end - position});
      return;
    }
    size_t limit = position + options.maxBytes;
    // Cut at the last whitespace in the second half of the window; a window
    // without any (one huge word) is cut at a character boundary.
    size_t windowEnd = limit;
    size_t floor = position + options.maxBytes / 2;
    while (windowEnd > floor && !isSpace(text[windowEnd]))
      --windowEnd;
    if (!isSpace(text[windowEnd])) {
      windowEnd = limit;
      while (windowEnd > floor && isContinuation(text[windowEnd]))
        --windowEnd;
    }
    size_t trimmedEnd = windowEnd;
    while (trimmedEnd > position && isSpace(text[trimmedEnd - 1]))
      --trimmedEnd;
    chunks.push_back({position, trimmedEnd - position});

    // The next window starts overlapBytes back, at the next word start.
    size_t next = windowEnd - options.overlapBytes;
    size_t wordStart = next;
    while (wordStart < windowEnd &&
           !(isSpace(text[wordStart - 1]) && !isSpace(text[wordStart])))
      ++wordStart;
    if (wordStart < windowEnd) {
      next = wordStart;
    } else {
      while (next < windowEnd && isContinuation(text[next]))
        ++next;
    }
    while (next < range.end && isSpace(text[next]))
      ++next;
    assert(next > position && "a window must advance");
    position = next;
  }
}

} // namespace

std::string ChunkOptions::describe() const {
  return "max=" + std::to_string(maxBytes) +
         ",overlap=" + std::to_string(overlapBytes) +
         ",min=" + std::to_string(minBytes);
}

llvm::SmallVector<Chunk, 8> chunkText(llvm::StringRef text,
                                      const ChunkOptions &options) {
  assert(options.maxBytes >= 8 && options.overlapBytes < options.maxBytes / 2 &&
         "chunk options out of range");
  llvm::SmallVector<Chunk, 8> chunks;
  for (const Range &group : groupParagraphs(findParagraphs(text), options)) {
    if (group.size() <= options.maxBytes)
      chunks.push_back({group.begin, group.size()});
    else
      splitLongRange(text, group, options, chunks);
  }
  return chunks;
}

} // namespace spanc::retrieval
