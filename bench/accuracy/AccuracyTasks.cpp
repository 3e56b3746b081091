//===- AccuracyTasks.cpp - The accuracy benchmark's questions -------------===//

#include "bench/accuracy/AccuracyTasks.h"

#include "bench/common/Names.h"
#include "bench/common/RandomText.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

namespace spanc::bench {

llvm::Error failure(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str().c_str());
}

bool isTask(llvm::StringRef name) {
  return name == "codes" || name == "prose" || name == "multihop";
}
bool hasDocTokens(llvm::StringRef task) { return task != "prose"; }

/// `hay` with `sentence` inserted at a sentence boundary chosen by `random`.
static std::string plant(const std::string &hay, const std::string &sentence,
                         std::mt19937_64 &random) {
  std::vector<size_t> boundaries = {0};
  for (size_t i = 0; i + 2 < hay.size(); ++i)
    if (hay[i] == '.' && hay[i + 1] == ' ')
      boundaries.push_back(i + 2);
  boundaries.push_back(hay.size() + 1);
  size_t at = boundaries[random() % boundaries.size()];
  if (at > hay.size())
    return hay + " " + sentence;
  return hay.substr(0, at) + sentence + " " + hay.substr(at);
}

/// A 4-digit code not in `codes`, added to it.
static std::string drawDistinctCode(std::set<std::string> &codes,
                                    std::mt19937_64 &random) {
  std::string code;
  do
    code = std::to_string(1000 + random() % 9000);
  while (codes.count(code));
  codes.insert(code);
  return code;
}

Context makeCodesContext(const model::Tokenizer &tokenizer, int64_t docs,
                         int64_t docTokens, uint64_t seed,
                         std::mt19937_64 &random) {
  Context context;
  std::set<std::string> codes;
  std::vector<std::string> names = personNames(random, size_t(docs));
  for (int64_t d = 0; d < docs; ++d) {
    std::string code = drawDistinctCode(codes, random);
    std::string hay =
        makeDocument(tokenizer, seed * 7919 + uint64_t(d) + 1, docTokens);
    context.documents.push_back(
        plant(hay, "The code of " + names[d] + " is " + code + ".", random));
    context.questions.push_back(
        {"What is the code of " + names[d] + "? Reply with the code only.",
         {code}});
  }
  return context;
}

/// The prose paragraphs of the reST files under `folder` (recursively, in
/// name order): blocks between blank lines that are neither directives,
/// code, tables nor headings, of at least 30 words.
llvm::Expected<std::vector<std::string>> loadPassages(llvm::StringRef folder) {
  std::vector<std::string> files;
  std::error_code error;
  for (llvm::sys::fs::recursive_directory_iterator it(folder, error), last;
       it != last && !error; it.increment(error))
    if (llvm::StringRef(it->path()).endswith(".rst.txt"))
      files.push_back(it->path());
  if (error)
    return failure("multihop_corpus " + folder + ": " + error.message());
  llvm::sort(files);
  std::vector<std::string> paragraphs;
  for (const std::string &file : files) {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    if (!buffer)
      continue;
    llvm::SmallVector<llvm::StringRef, 64> blocks;
    llvm::StringRef((*buffer)->getBuffer()).split(blocks, "\n\n");
    for (llvm::StringRef block : blocks) {
      block = block.trim();
      if (block.empty() || block.startswith("..") || block.startswith(">>>") ||
          block.contains("::") || block.contains("===") ||
          block.contains("---") || block.contains("+--") ||
          block.contains("``") || llvm::isSpace(block.front()))
        continue;
      llvm::SmallVector<llvm::StringRef, 64> words;
      block.split(words, ' ', -1, false);
      if (words.size() < 30)
        continue;
      std::string text;
      for (llvm::StringRef word : words)
        text += (text.empty() ? "" : " ") + word.trim().str();
      // reST roles and markup out: :func:`x` -> x, *a* -> a.
      std::string plain;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == ':' && i + 1 < text.size() &&
            std::isalpha(text[i + 1])) {
          size_t close = text.find(':', i + 1);
          if (close != std::string::npos && close + 1 < text.size() &&
              text[close + 1] == '`' &&
              llvm::all_of(
                  llvm::StringRef(text).slice(i + 1, close),
                  [](char c) { return std::isalnum(c) || c == ':'; })) {
            i = close;
            continue;
          }
        }
        if (text[i] == '`' || text[i] == '*' || text[i] == '~')
          continue;
        plain += text[i];
      }
      paragraphs.push_back(std::move(plain));
    }
  }
  if (paragraphs.size() < 64)
    return failure("multihop_corpus " + folder + ": " +
                   llvm::Twine(paragraphs.size()) +
                   " prose paragraphs, expected the Python documentation's "
                   "reST sources (Debian python3.11-doc, tools/setup.sh)");
  return paragraphs;
}

/// A passage of about `docTokens` tokens: consecutive paragraphs from a
/// random one on, cut at the last sentence end that fits.
static std::string makePassage(const model::Tokenizer &tokenizer,
                               llvm::ArrayRef<std::string> paragraphs,
                               int64_t docTokens, std::mt19937_64 &random) {
  size_t at = random() % paragraphs.size();
  std::string text;
  while (int64_t(tokenizer.encode(text, false).size()) < docTokens)
    text += (text.empty() ? "" : " ") + paragraphs[at++ % paragraphs.size()];
  std::vector<int32_t> tokens = tokenizer.encode(text, false);
  tokens.resize(size_t(docTokens));
  std::string cut = tokenizer.decode(tokens);
  size_t end = cut.rfind(". ");
  if (end != std::string::npos && end > cut.size() / 2)
    cut.resize(end + 1);
  return llvm::StringRef(cut).trim().str();
}

/// Python documentation passages with a planted code each; question d asks
/// for the codes of documents d and d + N/2 (mod N).
Context makeMultihopContext(const model::Tokenizer &tokenizer,
                            llvm::ArrayRef<std::string> paragraphs,
                            int64_t docs, int64_t docTokens,
                            std::mt19937_64 &random) {
  Context context;
  std::set<std::string> codes;
  std::vector<std::string> names = personNames(random, size_t(docs));
  std::vector<std::string> documentCodes;
  for (int64_t d = 0; d < docs; ++d) {
    std::string code = drawDistinctCode(codes, random);
    documentCodes.push_back(code);
    context.documents.push_back(
        plant(makePassage(tokenizer, paragraphs, docTokens, random),
              "The code of " + names[d] + " is " + code + ".", random));
  }
  for (int64_t d = 0; d < docs; ++d) {
    int64_t other = (d + docs / 2) % docs;
    Question question{"What are the codes of " + names[d] + " and of " +
                          names[other] + "? Reply with the two codes only.",
                      {documentCodes[d], documentCodes[other]},
                      /*needsAll=*/true};
    context.questions.push_back(std::move(question));
  }
  return context;
}

/// `docs` distinct documents of the pool, one question of each.
Context makeProseContext(llvm::ArrayRef<ProseDocument> pool, int64_t docs,
                         std::mt19937_64 &random) {
  std::vector<size_t> indices(pool.size());
  for (size_t i = 0; i < indices.size(); ++i)
    indices[i] = i;
  std::shuffle(indices.begin(), indices.end(), random);
  Context context;
  for (int64_t d = 0; d < docs; ++d) {
    const ProseDocument &document = pool[indices[size_t(d)]];
    Question question =
        document.questions[random() % document.questions.size()];
    question.text += " Answer briefly.";
    context.documents.push_back(document.text);
    context.questions.push_back(std::move(question));
  }
  return context;
}

/// prose.json: [{"text": ..., "questions": [{"question": ..., "answers":
/// [...]}, ...]}, ...].
llvm::Expected<std::vector<ProseDocument>> loadProse(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return failure("cannot read the prose task's documents " + path + ": " +
                   buffer.getError().message() +
                   " (set $SPANC_ROOT to the repository root)");
  std::vector<ProseDocument> pool;
  try {
    nlohmann::json json = nlohmann::json::parse((*buffer)->getBuffer().str());
    for (const nlohmann::json &entry : json) {
      ProseDocument document;
      document.text = entry.at("text").get<std::string>();
      for (const nlohmann::json &question : entry.at("questions")) {
        Question parsed;
        parsed.text = question.at("question").get<std::string>();
        parsed.accepted =
            question.at("answers").get<std::vector<std::string>>();
        if (parsed.accepted.empty())
          return failure(path + ": a question without answers: " + parsed.text);
        document.questions.push_back(std::move(parsed));
      }
      if (document.questions.empty())
        return failure(path + ": a document without questions");
      pool.push_back(std::move(document));
    }
  } catch (const nlohmann::json::exception &error) {
    return failure(path + ": " + error.what());
  }
  return pool;
}

} // namespace spanc::bench
