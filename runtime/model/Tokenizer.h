//===- Tokenizer.h - Tokenizers built from GGUF metadata ------------------===//
//
// Two tokenizer families, selected by `tokenizer.ggml.model`:
//  - "gpt2": byte-level BPE. Text is split by the family's pre-tokenizer
//    regexes (chosen by `tokenizer.ggml.pre`, run through PCRE2 in UTF mode),
//    each piece's bytes are mapped to the GPT-2 byte alphabet and merged by
//    `tokenizer.ggml.merges` rank.
//  - "llama": SentencePiece-style. Spaces become U+2581, a space is
//    prefixed, adjacent symbols merge by vocabulary score, unknown
//    characters fall back to <0xXX> byte tokens.
// Special tokens (control, user-defined) are split out of the text first,
// longest first, as llama.cpp does; control tokens only when parseSpecial
// is set. Merging uses a heap over a linked list of symbols, so encoding
// is O(n log n) in the length of each pre-tokenized word.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_TOKENIZER_H
#define SPANC_RUNTIME_MODEL_TOKENIZER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spanc::model {

class GgufFile;

enum class TokenizerKind { BytePairEncoding, SentencePiece };

/// `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Tokenizer {
public:
  /// Builds the tokenizer the GGUF file describes. Errors name the key.
  static llvm::Expected<std::unique_ptr<Tokenizer>>
  fromGguf(const GgufFile &file);
  ~Tokenizer();

  /// Token ids of `text`. No BOS/EOS is added (see addBosByDefault()).
  /// With `parseSpecial`, control tokens written in the text (such as
  /// "<|im_start|>") become their ids; user-defined tokens always do.
  std::vector<int32_t> encode(llvm::StringRef text, bool parseSpecial) const;

  /// The bytes token `id` stands for: byte-level BPE tokens are mapped back
  /// from the GPT-2 alphabet, SentencePiece U+2581 becomes a space and
  /// <0xXX> its byte. Control and unknown tokens give their text when
  /// `renderSpecial` is set and nothing otherwise. Out-of-range ids give "".
  std::string tokenToPiece(int32_t id, bool renderSpecial = true) const;
  /// The concatenated pieces. SentencePiece drops the space that encode()
  /// prefixed to the first piece.
  std::string decode(llvm::ArrayRef<int32_t> ids,
                     bool renderSpecial = true) const;

  TokenizerKind kind() const { return tokenizerKind; }
  /// `tokenizer.ggml.pre` ("smollm", "llama-bpe", "qwen2", ...), or "".
  llvm::StringRef preTokenizer() const { return preName; }
  int32_t vocabSize() const { return static_cast<int32_t>(tokens.size()); }
  /// The token's text as stored in the vocabulary (GPT-2 alphabet, U+2581).
  llvm::StringRef tokenText(int32_t id) const;
  TokenType tokenType(int32_t id) const;
  std::optional<int32_t> findToken(llvm::StringRef text) const;

  /// Special ids, -1 when the model has none.
  int32_t bosId() const { return bos; }
  int32_t eosId() const { return eos; }
  int32_t eotId() const { return eot; }
  int32_t unknownId() const { return unknown; }
  int32_t paddingId() const { return padding; }
  /// Whether prompts start with BOS (`tokenizer.ggml.add_bos_token`).
  bool addBosByDefault() const { return addBos; }
  /// End-of-generation: EOS, EOT, EOM and the end-of-turn tokens models
  /// use without declaring them (<|im_end|>, <|eot_id|>, <|endoftext|>...).
  bool isEndOfGeneration(int32_t id) const;
  llvm::ArrayRef<int32_t> endOfGenerationIds() const { return endIds; }

private:
  Tokenizer() = default;
  struct Regex;
  struct Fragment;

  llvm::Error initialize(const GgufFile &file);
  llvm::Error initializeBpe(const GgufFile &file);
  /// Refuses a vocabulary that cannot spell the bytes of text, and notes
  /// which bytes it spells (see the .cpp).
  llvm::Error checkByteFallback(const GgufFile &file);
  /// Byte-level BPE: `text` (valid UTF-8) with each character holding a
  /// byte the vocabulary has no token for replaced by U+FFFD.
  std::string replaceUnspellable(std::string text) const;
  void splitSpecial(llvm::StringRef text, bool parseSpecial,
                    std::vector<Fragment> &fragments) const;
  void encodeBpeText(llvm::StringRef text, std::vector<int32_t> &out) const;
  void encodeBpeWord(llvm::StringRef word, std::vector<int32_t> &out) const;
  void encodeSpmText(llvm::StringRef text, std::vector<int32_t> &out) const;
  int32_t lookup(llvm::StringRef text) const;

  TokenizerKind tokenizerKind = TokenizerKind::BytePairEncoding;
  std::string preName;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  llvm::StringMap<int32_t> tokenIds;
  /// Special tokens to split out of text, longest first.
  std::vector<int32_t> specialTokens;
  /// BPE: (left id, right id) -> (rank, merged id).
  llvm::DenseMap<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>>
      merges;
  std::vector<std::unique_ptr<Regex>> preTokenizers;
  /// Llama 3 style: a whole word that is a token skips merging.
  bool ignoreMerges = false;
  /// SentencePiece: <0xXX> token per byte (-1 when absent).
  int32_t byteTokens[256];
  /// Whether the vocabulary spells each byte (the byte-level alphabet's
  /// character, or SentencePiece's byte token), and all of valid UTF-8.
  bool byteSpelled[256] = {};
  bool everyByteSpelled = true;
  bool addSpacePrefix = true;

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unknown = -1, padding = -1;
  bool addBos = false;
  std::vector<int32_t> endIds;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_TOKENIZER_H
