//===- RandomText.cpp - Seeded English-like text for benchmark workloads --===//

#include "bench/common/RandomText.h"

#include <cctype>
#include <random>
#include <vector>

namespace spanc::bench {

namespace {

/// Common English words; documents are sentences of these.
const char *const kWords[] = {
    "the",       "of",       "and",     "to",       "in",      "a",
    "is",        "that",     "for",     "it",       "as",      "was",
    "with",      "be",       "by",      "on",       "not",     "he",
    "this",      "are",      "or",      "his",      "from",    "at",
    "which",     "but",      "have",    "an",       "had",     "they",
    "you",       "were",     "their",   "one",      "all",     "we",
    "can",       "her",      "has",     "there",    "been",    "if",
    "more",      "when",     "will",    "would",    "who",     "so",
    "no",        "river",    "city",    "market",   "winter",  "garden",
    "engine",    "village",  "letter",  "window",   "harbor",  "forest",
    "teacher",   "station",  "bridge",  "council",  "farmer",  "library",
    "mountain",  "kitchen",  "student", "doctor",   "machine", "history",
    "morning",   "evening",  "paper",   "stone",    "water",   "light",
    "people",    "family",   "school",  "country",  "company", "number",
    "system",    "program",  "problem", "question", "answer",  "report",
    "music",     "power",    "money",   "story",    "result",  "change",
    "build",     "carry",    "follow",  "gather",   "measure", "open",
    "close",     "travel",   "write",   "read",     "learn",   "choose",
    "explain",   "remember", "decide",  "return",   "arrive",  "repair",
    "quiet",     "bright",   "early",   "heavy",    "narrow",  "ancient",
    "careful",   "simple",   "public",  "local",    "small",   "large",
    "green",     "cold",     "warm",    "strong",   "slow",    "quick",
    "after",     "before",   "during",  "between",  "under",   "across",
    "because",   "although", "while",   "often",    "never",   "always",
    "yesterday", "together", "finally", "perhaps",  "several", "every",
};

} // namespace

llvm::ArrayRef<const char *> englishWords() { return kWords; }

std::string makeDocument(const model::Tokenizer &tokenizer, uint64_t seed,
                         size_t targetTokens) {
  std::mt19937_64 random(seed);
  const size_t numWords = sizeof(kWords) / sizeof(kWords[0]);
  std::vector<std::string> words;
  size_t sentenceLeft = 0;
  auto render = [&](size_t count) {
    std::string text;
    for (size_t i = 0; i < count; ++i) {
      if (i)
        text += ' ';
      text += words[i];
    }
    return text;
  };
  // Grow in chunks, then trim word by word to the target.
  while (true) {
    for (int i = 0; i < 32; ++i) {
      std::string word = kWords[random() % numWords];
      if (sentenceLeft == 0) {
        if (!words.empty())
          words.back() += '.';
        word[0] = char(std::toupper(word[0]));
        sentenceLeft = 6 + random() % 10;
      }
      --sentenceLeft;
      words.push_back(std::move(word));
    }
    if (tokenizer.encode(render(words.size()), false).size() >= targetTokens)
      break;
  }
  size_t count = words.size();
  while (count > 1 &&
         tokenizer.encode(render(count), false).size() > targetTokens)
    --count;
  std::string text = render(count);
  return text + ".";
}
} // namespace spanc::bench
