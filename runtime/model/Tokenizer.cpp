//===- Tokenizer.cpp - Tokenizers built from GGUF metadata ----------------===//

#include "runtime/model/Tokenizer.h"

#include "runtime/model/Gguf.h"
#include "runtime/model/Utf8.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"

#include <pcre2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <queue>

using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace spanc::model {

namespace {

Error tokenizerError(const GgufFile &file, const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (Twine(file.name()) + ": " + message).str());
}

/// GPT-2's reversible byte -> printable code point mapping: printable
/// Latin-1 bytes map to themselves, the other 68 to U+0100 upwards.
struct ByteAlphabet {
  std::string encoded[256];
  int16_t decoded[512];

  ByteAlphabet() {
    std::fill(std::begin(decoded), std::end(decoded), -1);
    uint32_t next = 256;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      bool printable = (byte >= 0x21 && byte <= 0x7e) ||
                       (byte >= 0xa1 && byte <= 0xac) ||
                       (byte >= 0xae && byte <= 0xff);
      uint32_t codePoint = printable ? byte : next++;
      appendUtf8(encoded[byte], codePoint);
      decoded[codePoint] = static_cast<int16_t>(byte);
    }
  }
};

const ByteAlphabet &byteAlphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

// Pre-tokenizer regexes by family (the published patterns of each model's
// tokenizer.json, in the case-sensitive form llama.cpp applies).
constexpr const char *gpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)";
constexpr const char *llama3Pattern =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char *qwen2Pattern =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreTokenizerSpec {
  std::vector<const char *> patterns;
  bool ignoreMerges = false;
  bool addBos = false;
};

std::optional<PreTokenizerSpec> preTokenizerFor(StringRef name) {
  if (name == "smollm" || name == "starcoder" || name == "refact" ||
      name == "command-r" || name == "codeshell" || name == "exaone" ||
      name == "minerva")
    return PreTokenizerSpec{{"\\p{N}", gpt2Pattern}, false, false};
  if (name == "gpt-2" || name == "mpt" || name == "olmo" || name == "jais")
    return PreTokenizerSpec{{gpt2Pattern}, false, false};
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" ||
      name == "falcon3" || name == "pixtral")
    return PreTokenizerSpec{{llama3Pattern}, true, true};
  if (name == "qwen2" || name == "deepseek-r1-qwen")
    return PreTokenizerSpec{{qwen2Pattern}, false, false};
  if (name == "default" || name.empty())
    return PreTokenizerSpec{{"[\\p{P}\\$\\+<=>\\^~\\|]+", gpt2Pattern,
                             "\\p{N}+", "[0-9][0-9][0-9]"},
                            false,
                            false};
  return std::nullopt;
}

} // namespace

/// A compiled pre-tokenizer regex (JIT-compiled where PCRE2 supports it).
struct Tokenizer::Regex {
  pcre2_code *code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

/// A piece of the input: raw text [begin, end) or a special token.
struct Tokenizer::Fragment {
  int32_t token;
  size_t begin, end;
};

Tokenizer::~Tokenizer() = default;

Expected<std::unique_ptr<Tokenizer>> Tokenizer::fromGguf(const GgufFile &file) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  if (Error error = tokenizer->initialize(file))
    return error;
  return tokenizer;
}

Error Tokenizer::initialize(const GgufFile &file) {
  Expected<StringRef> model = file.getString("tokenizer.ggml.model");
  if (!model)
    return model.takeError();
  if (*model == "gpt2")
    tokenizerKind = TokenizerKind::BytePairEncoding;
  else if (*model == "llama")
    tokenizerKind = TokenizerKind::SentencePiece;
  else
    return tokenizerError(file, "unsupported tokenizer.ggml.model '" + *model +
                                    "' (supported: gpt2, llama)");

  Expected<std::vector<StringRef>> texts =
      file.getStringArray("tokenizer.ggml.tokens");
  if (!texts)
    return texts.takeError();
  if (texts->empty() || texts->size() > (1u << 30))
    return tokenizerError(file, "tokenizer.ggml.tokens has " +
                                    Twine(texts->size()) + " entries");
  size_t count = texts->size();
  tokens.reserve(count);
  for (size_t id = 0; id < count; ++id) {
    tokens.push_back((*texts)[id].str());
    // Later duplicates win, as in llama.cpp's text -> id map.
    tokenIds[(*texts)[id]] = static_cast<int32_t>(id);
  }

  if (file.contains("tokenizer.ggml.scores")) {
    Expected<std::vector<float>> values =
        file.getFloatArray("tokenizer.ggml.scores");
    if (!values)
      return values.takeError();
    if (values->size() != count)
      return tokenizerError(file, "tokenizer.ggml.scores has " +
                                      Twine(values->size()) + " entries for " +
                                      Twine(count) + " tokens");
    // SentencePiece merges by score: a NaN breaks the ordering.
    for (size_t id = 0; id < count; ++id)
      if (!std::isfinite((*values)[id]))
        return tokenizerError(file, "tokenizer.ggml.scores entry " + Twine(id) +
                                        " (token '" + (*texts)[id] +
                                        "') is not finite");
    scores = std::move(*values);
  } else {
    scores.assign(count, 0.0f);
  }
  types.assign(count, TokenType::Normal);
  if (file.contains("tokenizer.ggml.token_type")) {
    Expected<std::vector<int64_t>> values =
        file.getIntArray("tokenizer.ggml.token_type");
    if (!values)
      return values.takeError();
    if (values->size() != count)
      return tokenizerError(file, "tokenizer.ggml.token_type has " +
                                      Twine(values->size()) + " entries for " +
                                      Twine(count) + " tokens");
    for (size_t id = 0; id < count; ++id) {
      int64_t type = (*values)[id];
      types[id] = type >= 0 && type <= 6 ? static_cast<TokenType>(type)
                                         : TokenType::Undefined;
    }
  }

  // Special ids: missing keys keep the family default.
  if (tokenizerKind == TokenizerKind::SentencePiece) {
    bos = 1;
    eos = 2;
    unknown = 0;
    addBos = true;
  }
  struct SpecialKey {
    const char *key;
    int32_t *id;
  } specialKeys[] = {
      {"tokenizer.ggml.bos_token_id", &bos},
      {"tokenizer.ggml.eos_token_id", &eos},
      {"tokenizer.ggml.eot_token_id", &eot},
      {"tokenizer.ggml.eom_token_id", &eom},
      {"tokenizer.ggml.unknown_token_id", &unknown},
      {"tokenizer.ggml.padding_token_id", &padding},
  };
  for (const SpecialKey &special : specialKeys) {
    if (!file.contains(special.key))
      continue;
    Expected<uint64_t> id = file.getUnsigned(special.key);
    if (!id)
      return id.takeError();
    if (*id >= count)
      return tokenizerError(file, Twine(special.key) + " is " + Twine(*id) +
                                      ", outside the vocabulary of " +
                                      Twine(count) + " tokens");
    *special.id = static_cast<int32_t>(*id);
  }

  if (tokenizerKind == TokenizerKind::BytePairEncoding) {
    if (Error error = initializeBpe(file))
      return error;
  } else {
    for (int byte = 0; byte < 256; ++byte) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", byte);
      byteTokens[byte] = lookup(name);
    }
  }
  if (Error error = checkByteFallback(file))
    return error;

  Expected<bool> bosFlag = file.getBool("tokenizer.ggml.add_bos_token", addBos);
  if (!bosFlag)
    return bosFlag.takeError();
  addBos = *bosFlag && bos >= 0;
  Expected<bool> spaceFlag =
      file.getBool("tokenizer.ggml.add_space_prefix",
                   tokenizerKind == TokenizerKind::SentencePiece);
  if (!spaceFlag)
    return spaceFlag.takeError();
  addSpacePrefix = *spaceFlag;

  // Control, user-defined and unknown tokens are matched in the text
  // before tokenization, longest first.
  for (size_t id = 0; id < count; ++id)
    if ((types[id] == TokenType::Control ||
         types[id] == TokenType::UserDefined ||
         types[id] == TokenType::Unknown) &&
        !tokens[id].empty())
      specialTokens.push_back(static_cast<int32_t>(id));
  std::stable_sort(specialTokens.begin(), specialTokens.end(),
                   [&](int32_t left, int32_t right) {
                     return tokens[left].size() > tokens[right].size();
                   });

  // End of generation: declared ids plus the end-of-turn tokens models use
  // without declaring them.
  for (int32_t id : {eos, eot, eom})
    if (id >= 0)
      endIds.push_back(id);
  for (const char *name :
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>", "<EOT>", "<|end_of_text|>"}) {
    int32_t id = lookup(name);
    if (id < 0)
      continue;
    if (eot < 0 &&
        (StringRef(name) == "<|eot_id|>" || StringRef(name) == "<|im_end|>" ||
         StringRef(name) == "<|end|>" || StringRef(name) == "<end_of_turn>"))
      eot = id;
    if (std::find(endIds.begin(), endIds.end(), id) == endIds.end())
      endIds.push_back(id);
  }
  return Error::success();
}

/// Whether `byte` can occur in valid UTF-8 (what encode() tokenizes: it
/// replaces invalid sequences by U+FFFD first).
static bool occursInUtf8(unsigned byte) {
  return byte < 0xc0 || (byte >= 0xc2 && byte <= 0xf4);
}

/// Whether ordinary text needs a token for `byte`: tab, newline, carriage
/// return, printable ASCII and every byte of valid UTF-8 but 0xF1 and 0xF2,
/// the lead bytes of planes 4 to 11, where Unicode assigns nothing. Real
/// byte-level vocabularies leave out some C0 controls (SmolLM2: 0x04,
/// 0x06, 0x13, 0x14, 0x16, 0x1D) and those two lead bytes.
static bool textNeeds(unsigned byte) {
  if (byte < 0x20)
    return byte == '\t' || byte == '\n' || byte == '\r';
  return byte != 0x7f && occursInUtf8(byte) && byte != 0xf1 && byte != 0xf2;
}

Error Tokenizer::checkByteFallback(const GgufFile &file) {
  // Any text must become tokens: a character the vocabulary cannot spell
  // falls back to its bytes.
  //
  // Byte-level BPE spells every byte with its alphabet character and has
  // no unknown token. A vocabulary without the token of a byte that text
  // needs (textNeeds) is refused: it dropped that byte from every prompt,
  // silently ("Hello World" without "H" encoded as "ello World"). A byte
  // text rarely holds (a C0 control) may lack one, as in real models; a
  // character with such a byte is encoded as U+FFFD, as invalid UTF-8 is,
  // so that something stands where it was (llama.cpp drops it).
  //
  // SentencePiece uses <0xXX> byte tokens where it has them, else the
  // unknown token, as SentencePiece models trained without byte fallback
  // do: the character is replaced, visibly, not dropped. A vocabulary with
  // neither is refused.
  const ByteAlphabet &alphabet = byteAlphabet();
  unsigned missing = 0, first = 0;
  everyByteSpelled = true;
  for (unsigned byte = 0; byte < 256; ++byte) {
    bool spelled = tokenizerKind == TokenizerKind::BytePairEncoding
                       ? lookup(alphabet.encoded[byte]) >= 0
                       : byteTokens[byte] >= 0;
    byteSpelled[byte] = spelled;
    if (spelled || !occursInUtf8(byte))
      continue;
    everyByteSpelled = false;
    if (tokenizerKind == TokenizerKind::BytePairEncoding && !textNeeds(byte))
      continue;
    if (missing++ == 0)
      first = byte;
  }
  if (missing == 0)
    return Error::success();
  char byteName[16];
  std::snprintf(byteName, sizeof(byteName), "0x%02X", first);
  std::string shown = first >= 0x21 && first <= 0x7e
                          ? " '" + std::string(1, char(first)) + "'"
                          : "";
  std::string others =
      missing > 1 ? " (and " + std::to_string(missing - 1) + " other bytes)"
                  : "";
  if (tokenizerKind == TokenizerKind::BytePairEncoding)
    return tokenizerError(
        file, Twine("tokenizer.ggml.tokens has no token for byte ") + byteName +
                  shown + " ('" + alphabet.encoded[first] +
                  "' in the byte-level alphabet)" + others +
                  ": text holding it cannot be encoded (a byte-level BPE "
                  "vocabulary needs one for every byte of text)");
  if (unknown >= 0 && types[unknown] == TokenType::Unknown)
    return Error::success();
  return tokenizerError(
      file, Twine("tokenizer.ggml.tokens has no byte token <") + byteName +
                ">" + shown + others +
                ", and no unknown token (tokenizer.ggml.unknown_token_id, "
                "of token type unknown) to stand for it: text holding it "
                "cannot be encoded");
}

std::string Tokenizer::replaceUnspellable(std::string text) const {
  if (everyByteSpelled)
    return text;
  std::string out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    size_t start = offset;
    uint32_t codePoint;
    decodeUtf8(text, offset, codePoint); // valid: sanitized before
    bool spelled = true;
    for (size_t index = start; index < offset; ++index)
      spelled &= byteSpelled[static_cast<unsigned char>(text[index])];
    if (spelled)
      out.append(text, start, offset - start);
    else
      appendUtf8(out, 0xfffd);
  }
  return out;
}

Error Tokenizer::initializeBpe(const GgufFile &file) {
  Expected<StringRef> pre = file.getString("tokenizer.ggml.pre", "default");
  if (!pre)
    return pre.takeError();
  preName = pre->str();
  std::optional<PreTokenizerSpec> spec = preTokenizerFor(*pre);
  if (!spec)
    return tokenizerError(file, "unsupported tokenizer.ggml.pre '" + *pre +
                                    "' (supported: smollm, starcoder, gpt-2, "
                                    "llama-bpe, llama3, qwen2, default, ...)");
  ignoreMerges = spec->ignoreMerges;
  if (spec->addBos)
    addBos = true;
  for (const char *pattern : spec->patterns) {
    int errorCode = 0;
    PCRE2_SIZE errorOffset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern),
                                PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                &errorCode, &errorOffset, nullptr);
    if (!regex->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(errorCode, message, sizeof(message));
      return tokenizerError(file, "pre-tokenizer regex for '" + *pre +
                                      "' does not compile at offset " +
                                      Twine(errorOffset) + ": " +
                                      reinterpret_cast<char *>(message));
    }
    // The JIT is a speed-up only; the interpreter gives the same matches.
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    preTokenizers.push_back(std::move(regex));
  }

  Expected<std::vector<StringRef>> mergeList =
      file.getStringArray("tokenizer.ggml.merges");
  if (!mergeList)
    return mergeList.takeError();
  merges.reserve(mergeList->size());
  for (size_t rank = 0; rank < mergeList->size(); ++rank) {
    StringRef merge = (*mergeList)[rank];
    // Split at the first space after the first character: "Ġ t" or "  a"
    // style merges keep a leading space in the left part.
    size_t split = merge.find(' ', 1);
    if (split == StringRef::npos)
      return tokenizerError(file, "tokenizer.ggml.merges entry " + Twine(rank) +
                                      " '" + merge +
                                      "' is not two space-separated parts");
    StringRef left = merge.substr(0, split), right = merge.substr(split + 1);
    int32_t leftId = lookup(left), rightId = lookup(right);
    if (leftId < 0 || rightId < 0)
      continue; // can never apply: symbols are always tokens here
    int32_t mergedId = lookup((left + right).str());
    merges.try_emplace({leftId, rightId},
                       std::make_pair(static_cast<int32_t>(rank), mergedId));
  }
  return Error::success();
}

int32_t Tokenizer::lookup(StringRef text) const {
  auto found = tokenIds.find(text);
  return found == tokenIds.end() ? -1 : found->second;
}

std::optional<int32_t> Tokenizer::findToken(StringRef text) const {
  int32_t id = lookup(text);
  if (id < 0)
    return std::nullopt;
  return id;
}

StringRef Tokenizer::tokenText(int32_t id) const {
  if (id < 0 || id >= vocabSize())
    return "";
  return tokens[id];
}

TokenType Tokenizer::tokenType(int32_t id) const {
  if (id < 0 || id >= vocabSize())
    return TokenType::Undefined;
  return types[id];
}

bool Tokenizer::isEndOfGeneration(int32_t id) const {
  return std::find(endIds.begin(), endIds.end(), id) != endIds.end();
}

void Tokenizer::splitSpecial(StringRef text, bool parseSpecial,
                             std::vector<Fragment> &fragments) const {
  fragments.clear();
  if (text.empty())
    return;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  // One pass per special token, longest first, over the raw fragments
  // left by the previous passes (llama.cpp's partition order).
  for (int32_t id : specialTokens) {
    if (!parseSpecial && types[id] != TokenType::UserDefined)
      continue;
    StringRef needle = tokens[id];
    next.clear();
    bool found = false;
    for (const Fragment &fragment : fragments) {
      if (fragment.token >= 0 ||
          fragment.end - fragment.begin < needle.size()) {
        next.push_back(fragment);
        continue;
      }
      size_t position = fragment.begin;
      while (position < fragment.end) {
        size_t match = text.substr(0, fragment.end).find(needle, position);
        if (match == StringRef::npos)
          break;
        found = true;
        if (match > position)
          next.push_back({-1, position, match});
        next.push_back({id, match, match + needle.size()});
        position = match + needle.size();
      }
      if (position < fragment.end)
        next.push_back({-1, position, fragment.end});
    }
    if (found)
      fragments.swap(next);
  }
}

std::vector<int32_t> Tokenizer::encode(StringRef text,
                                       bool parseSpecial) const {
  std::vector<int32_t> out;
  std::vector<Fragment> fragments;
  splitSpecial(text, parseSpecial, fragments);
  bool previousSpecial = true; // SentencePiece: prefix a space at the start
  for (const Fragment &fragment : fragments) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      previousSpecial = true;
      continue;
    }
    StringRef piece = text.slice(fragment.begin, fragment.end);
    if (tokenizerKind == TokenizerKind::BytePairEncoding) {
      encodeBpeText(piece, out);
    } else {
      // The space prefix follows every special token too, as llama.cpp does.
      std::string escaped;
      if (addSpacePrefix && previousSpecial)
        escaped = "\xe2\x96\x81";
      for (char c : piece) {
        if (c == ' ')
          escaped += "\xe2\x96\x81";
        else
          escaped += c;
      }
      encodeSpmText(escaped, out);
    }
    previousSpecial = false;
  }
  return out;
}

void Tokenizer::encodeBpeText(StringRef rawText,
                              std::vector<int32_t> &out) const {
  std::string text = replaceUnspellable(sanitizeUtf8(rawText));
  // Pieces as [begin, end) offsets into `text`, refined by each regex.
  std::vector<std::pair<size_t, size_t>> pieces = {{0, text.size()}};
  std::vector<std::pair<size_t, size_t>> refined;
  pcre2_match_data *matchData = pcre2_match_data_create(1, nullptr);
  for (const std::unique_ptr<Regex> &regex : preTokenizers) {
    refined.clear();
    for (auto [begin, end] : pieces) {
      // Match against the piece alone so lookaheads stop at its end.
      PCRE2_SPTR subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
      size_t length = end - begin, offset = 0;
      while (offset < length) {
        int result = pcre2_match(regex->code, subject, length, offset,
                                 PCRE2_NO_UTF_CHECK, matchData, nullptr);
        // A JIT resource limit is not "no match": retry interpreted.
        if (result < 0 && result != PCRE2_ERROR_NOMATCH)
          result = pcre2_match(regex->code, subject, length, offset,
                               PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, matchData,
                               nullptr);
        if (result < 0)
          break;
        PCRE2_SIZE *vector = pcre2_get_ovector_pointer(matchData);
        size_t matchBegin = vector[0], matchEnd = vector[1];
        if (matchEnd == matchBegin) // cannot happen with these patterns
          matchEnd =
              std::min(length, matchBegin + utf8Length(subject[matchBegin]));
        if (matchBegin > offset)
          refined.push_back({begin + offset, begin + matchBegin});
        refined.push_back({begin + matchBegin, begin + matchEnd});
        offset = matchEnd;
      }
      if (offset < length)
        refined.push_back({begin + offset, end});
    }
    pieces.swap(refined);
  }
  pcre2_match_data_free(matchData);
  for (auto [begin, end] : pieces)
    encodeBpeWord(StringRef(text).slice(begin, end), out);
}

namespace {

struct Symbol {
  int32_t id; ///< token id of the symbol's text, or -1
  int32_t prev, next;
  uint32_t begin, length; ///< in the byte-encoded word
};

struct Candidate {
  int32_t priority; ///< BPE rank (lower first)
  float score;      ///< SentencePiece score (higher first)
  int32_t left, right;
  int32_t leftId, rightId;
  uint32_t length;
};

struct BpeOrder {
  bool operator()(const Candidate &a, const Candidate &b) const {
    return a.priority > b.priority ||
           (a.priority == b.priority && a.left > b.left);
  }
};

struct SpmOrder {
  bool operator()(const Candidate &a, const Candidate &b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

} // namespace

void Tokenizer::encodeBpeWord(StringRef word, std::vector<int32_t> &out) const {
  if (word.empty())
    return;
  const ByteAlphabet &alphabet = byteAlphabet();
  std::string encoded;
  encoded.reserve(word.size() * 2);
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (unsigned char byte : word) {
    const std::string &character = alphabet.encoded[byte];
    uint32_t begin = static_cast<uint32_t>(encoded.size());
    encoded += character;
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({lookup(character), index - 1, index + 1, begin,
                       static_cast<uint32_t>(character.size())});
  }
  symbols.back().next = -1;
  if (ignoreMerges) {
    int32_t whole = lookup(encoded);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  std::priority_queue<Candidate, std::vector<Candidate>, BpeOrder> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0)
      return;
    int32_t leftId = symbols[left].id, rightId = symbols[right].id;
    if (leftId < 0 || rightId < 0)
      return;
    auto found = merges.find({leftId, rightId});
    if (found == merges.end())
      return;
    queue.push({found->second.first, 0.0f, left, right, leftId, rightId, 0});
  };
  for (int32_t index = 0; index + 1 < static_cast<int32_t>(symbols.size());
       ++index)
    consider(index, index + 1);
  while (!queue.empty()) {
    Candidate candidate = queue.top();
    queue.pop();
    Symbol &left = symbols[candidate.left];
    Symbol &right = symbols[candidate.right];
    // Stale: one side has merged since (its length or id changed).
    if (left.length == 0 || right.length == 0 || left.next != candidate.right ||
        left.id != candidate.leftId || right.id != candidate.rightId)
      continue;
    left.length += right.length;
    left.id = merges.find({candidate.leftId, candidate.rightId})->second.second;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0)
      symbols[right.next].prev = candidate.left;
    consider(left.prev, candidate.left);
    consider(candidate.left, left.next);
  }
  for (int32_t index = 0; index >= 0; index = symbols[index].next) {
    const Symbol &symbol = symbols[index];
    if (symbol.id >= 0) {
      out.push_back(symbol.id);
      continue;
    }
    // Not a token (a merge whose result is missing from the vocabulary):
    // fall back to one token per character, as llama.cpp does.
    StringRef text(encoded.data() + symbol.begin, symbol.length);
    for (size_t offset = 0; offset < text.size();) {
      size_t length =
          std::min(text.size() - offset,
                   utf8Length(static_cast<unsigned char>(text[offset])));
      int32_t id = lookup(text.substr(offset, length));
      if (id >= 0)
        out.push_back(id);
      offset += length;
    }
  }
}

void Tokenizer::encodeSpmText(StringRef text, std::vector<int32_t> &out) const {
  if (text.empty())
    return;
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    size_t length =
        std::min(text.size() - offset,
                 utf8Length(static_cast<unsigned char>(text[offset])));
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({-1, index - 1, index + 1, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(length)});
    offset += length;
  }
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, SpmOrder> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0)
      return;
    uint32_t length = symbols[left].length + symbols[right].length;
    int32_t id = lookup(text.substr(symbols[left].begin, length));
    if (id < 0)
      return;
    queue.push({0, scores[id], left, right, id, -1, length});
  };
  for (int32_t index = 0; index + 1 < static_cast<int32_t>(symbols.size());
       ++index)
    consider(index, index + 1);
  while (!queue.empty()) {
    Candidate candidate = queue.top();
    queue.pop();
    Symbol &left = symbols[candidate.left];
    Symbol &right = symbols[candidate.right];
    if (left.length == 0 || right.length == 0 ||
        left.length + right.length != candidate.length ||
        left.next != candidate.right)
      continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0)
      symbols[right.next].prev = candidate.left;
    consider(left.prev, candidate.left);
    consider(candidate.left, left.next);
  }
  for (int32_t index = 0; index >= 0; index = symbols[index].next) {
    const Symbol &symbol = symbols[index];
    StringRef piece = text.substr(symbol.begin, symbol.length);
    int32_t id = lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char byte : piece) {
      int32_t byteId = byteTokens[byte] >= 0 ? byteTokens[byte] : unknown;
      if (byteId >= 0)
        out.push_back(byteId);
    }
  }
}

std::string Tokenizer::tokenToPiece(int32_t id, bool renderSpecial) const {
  if (id < 0 || id >= vocabSize())
    return "";
  const std::string &text = tokens[id];
  switch (types[id]) {
  case TokenType::Control:
  case TokenType::Unknown:
    return renderSpecial ? text : std::string();
  case TokenType::UserDefined:
    return text;
  case TokenType::Unused:
  case TokenType::Undefined:
    return "";
  case TokenType::Byte:
    if (tokenizerKind == TokenizerKind::SentencePiece && text.size() == 6 &&
        StringRef(text).startswith("<0x")) {
      unsigned value = 0;
      if (!StringRef(text).substr(3, 2).getAsInteger(16, value))
        return std::string(1, static_cast<char>(value));
    }
    return text;
  case TokenType::Normal:
    break;
  }
  if (tokenizerKind == TokenizerKind::SentencePiece) {
    std::string piece;
    StringRef rest = text;
    while (!rest.empty()) {
      if (rest.startswith("\xe2\x96\x81")) {
        piece += ' ';
        rest = rest.drop_front(3);
      } else {
        piece += rest.front();
        rest = rest.drop_front();
      }
    }
    return piece;
  }
  // Byte-level BPE: each character of the token is one byte.
  const ByteAlphabet &alphabet = byteAlphabet();
  std::string piece;
  for (size_t offset = 0; offset < text.size();) {
    uint32_t codePoint;
    size_t start = offset;
    if (decodeUtf8(text, offset, codePoint) && codePoint < 512 &&
        alphabet.decoded[codePoint] >= 0)
      piece += static_cast<char>(alphabet.decoded[codePoint]);
    else
      piece.append(text, start, offset - start);
  }
  return piece;
}

std::string Tokenizer::decode(llvm::ArrayRef<int32_t> ids,
                              bool renderSpecial) const {
  std::string text;
  for (size_t index = 0; index < ids.size(); ++index) {
    std::string piece = tokenToPiece(ids[index], renderSpecial);
    // SentencePiece: drop the space encode() prefixed to the text (only
    // when the first id is text, as llama.cpp's detokenizer does).
    if (index == 0 && tokenizerKind == TokenizerKind::SentencePiece &&
        addSpacePrefix && !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    text += piece;
  }
  return text;
}

} // namespace spanc::model
