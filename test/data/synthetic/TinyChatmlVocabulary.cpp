//===- TinyChatmlVocabulary.cpp - The synthetic ChatML vocabulary ---------===//

#include "test/data/synthetic/TinyChatmlVocabulary.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

using namespace spanc::model;

namespace spanc::synthetic {

namespace {

/// Words that become single tokens: the ChatML role names and the words of
/// the plan tests' prompts.
const char *const kWords[] = {
    "system",    "user",    "assistant", "the",     "and",      "of",
    "to",        "is",      "in",        "a",       "an",       "what",
    "which",     "answer",  "question",  "doc",     "document", "Paris",
    "France",    "capital", "city",      "best",    "judge",    "write",
    "story",     "about",   "cat",       "dog",     "Summar",   "ize",
    "You",       "are",     "helpful",   "Answer",  "using",    "these",
    "documents", "Pick",    "one",       "river",   "sea",      "sun",
    "moon",      "poem",    "short",     "Compare", "Rank",     "first",
    "second",    "Write",   "What",      "The",     "context",  "only",
};

/// The GPT-2 byte alphabet: printable Latin-1 bytes stand for themselves,
/// the others are mapped, in byte order, to U+0100 and up.
std::string byteSymbol(unsigned byte) {
  bool printable = (byte >= 0x21 && byte <= 0x7e) ||
                   (byte >= 0xa1 && byte <= 0xac) ||
                   (byte >= 0xae && byte <= 0xff);
  unsigned codePoint = byte;
  if (!printable) {
    unsigned index = 0;
    for (unsigned b = 0; b < byte; ++b)
      if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
            (b >= 0xae && b <= 0xff)))
        ++index;
    codePoint = 256 + index;
  }
  std::string utf8;
  if (codePoint < 0x80) {
    utf8 += char(codePoint);
  } else {
    utf8 += char(0xc0 | (codePoint >> 6));
    utf8 += char(0x80 | (codePoint & 0x3f));
  }
  return utf8;
}

/// Symbols of `text` in the byte alphabet.
std::vector<std::string> symbols(llvm::StringRef text) {
  std::vector<std::string> result;
  for (unsigned char c : text)
    result.push_back(byteSymbol(c));
  return result;
}

} // namespace

size_t addTinyChatmlVocabulary(GgufWriter &writer) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>",
                                     "<|im_end|>"};
  std::vector<int32_t> types = {3, 3, 3};
  for (unsigned byte = 0; byte < 256; ++byte) {
    tokens.push_back(byteSymbol(byte));
    types.push_back(1);
  }
  llvm::StringMap<bool> known;
  for (const std::string &token : tokens)
    known[token] = true;
  std::vector<std::string> merges;
  for (const char *word : kWords) {
    for (std::string text : {std::string(word), " " + std::string(word)}) {
      std::vector<std::string> parts = symbols(text);
      std::string left = parts[0];
      for (size_t i = 1; i < parts.size(); ++i) {
        std::string merged = left + parts[i];
        if (!known.count(merged)) {
          known[merged] = true;
          tokens.push_back(merged);
          types.push_back(1);
          merges.push_back(left + " " + parts[i]);
        }
        left = merged;
      }
    }
  }

  writer.addString("tokenizer.ggml.model", "gpt2");
  writer.addString("tokenizer.ggml.pre", "smollm");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  writer.addStringArray("tokenizer.ggml.merges", merges);
  writer.addUInt32("tokenizer.ggml.bos_token_id", 1);
  writer.addUInt32("tokenizer.ggml.eos_token_id", 2);
  writer.addUInt32("tokenizer.ggml.padding_token_id", 0);
  writer.addBool("tokenizer.ggml.add_bos_token", false);
  // The ChatML format; ChatTemplate recognizes it by its markers.
  writer.addString(
      "tokenizer.chat_template",
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
      "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
      "{% endif %}");
  return tokens.size();
}

} // namespace spanc::synthetic
