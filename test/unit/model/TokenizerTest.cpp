//===- TokenizerTest.cpp - Tokenizers against llama.cpp and by hand -------===//
//
// The SmolLM2 tests compare with token ids that llama.cpp's llama-tokenize
// produced for the same GGUF (test/data/reference/README.md says how). The
// synthetic tests build tiny vocabularies with GgufWriter, where the right
// answer can be worked out by hand.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Tokenizer.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/GgufWriter.h"
#include "test/unit/model/SyntheticVocabulary.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

using namespace spanc::model;

namespace {

std::string modelPath() {
  const char *root = std::getenv("SPANC_ROOT");
  return std::string(root ? root : ".") +
         "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

class SmolLM2Tokenizer : public ::testing::Test {
protected:
  void SetUp() override {
    if (!llvm::sys::fs::exists(modelPath()))
      GTEST_SKIP() << "model not installed (tools/setup.sh): " << modelPath();
    auto opened = GgufFile::open(modelPath());
    ASSERT_TRUE(static_cast<bool>(opened))
        << llvm::toString(opened.takeError());
    file = std::move(*opened);
    auto built = Tokenizer::fromGguf(*file);
    ASSERT_TRUE(static_cast<bool>(built)) << llvm::toString(built.takeError());
    tokenizer = std::move(*built);
  }
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

nlohmann::json loadReference(const std::string &name) {
  auto buffer = llvm::MemoryBuffer::getFile("test/data/reference/" + name);
  EXPECT_TRUE(static_cast<bool>(buffer)) << name;
  if (!buffer)
    return {};
  return nlohmann::json::parse((*buffer)->getBuffer().str());
}

/// A byte-level BPE vocabulary: the 256 byte characters (but
/// `missingByte`'s, whose place holds "<unused>"), then merged tokens,
/// then specials.
GgufWriter bpeVocabulary(std::vector<std::string> merged,
                         std::vector<std::string> merges,
                         std::string pre = "gpt-2", int missingByte = -1) {
  // The GPT-2 alphabet for printable ASCII is the character itself; space
  // is U+0120 "Ġ", newline U+010A "Ċ".
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  int next = 256;
  for (int byte = 0; byte < 256; ++byte) {
    bool printable = (byte >= 0x21 && byte <= 0x7e) ||
                     (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae);
    int codePoint = printable ? byte : next++;
    std::string text;
    if (codePoint < 0x80) {
      text += static_cast<char>(codePoint);
    } else {
      text += static_cast<char>(0xc0 | (codePoint >> 6));
      text += static_cast<char>(0x80 | (codePoint & 0x3f));
    }
    tokens.push_back(byte == missingByte ? "<unused>" : text);
    types.push_back(1);
  }
  for (const std::string &token : merged) {
    tokens.push_back(token);
    types.push_back(1);
  }
  tokens.push_back("<|im_start|>");
  types.push_back(3);
  tokens.push_back("<|im_end|>");
  types.push_back(3);
  tokens.push_back("<tool>");
  types.push_back(4); // user-defined: matched even without parseSpecial
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "gpt2");
  writer.addString("tokenizer.ggml.pre", pre);
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  writer.addStringArray("tokenizer.ggml.merges", merges);
  writer.addUInt32("tokenizer.ggml.eos_token_id",
                   static_cast<uint32_t>(tokens.size() - 2));
  return writer;
}

/// The tokenizer of bpeVocabulary(merged, merges, pre).
std::unique_ptr<Tokenizer> syntheticBpe(std::vector<std::string> merged,
                                        std::vector<std::string> merges,
                                        std::string pre = "gpt-2") {
  GgufWriter writer = bpeVocabulary(merged, merges, pre);
  auto file = GgufFile::openBuffer(writer.write(), "bpe.gguf");
  EXPECT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  EXPECT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  return std::move(*tokenizer);
}

} // namespace

TEST_F(SmolLM2Tokenizer, MatchesLlamaCppOnTheReferenceTextSet) {
  nlohmann::json reference = loadReference("tokenizer_smollm2.json");
  ASSERT_GE(reference["cases"].size(), 30u);
  for (const nlohmann::json &item : reference["cases"]) {
    std::string text = item["text"];
    std::vector<int32_t> expected = item["ids"];
    EXPECT_EQ(tokenizer->encode(text, item["parse_special"]), expected)
        << item["name"];
  }
}

TEST_F(SmolLM2Tokenizer, GreedyReferencePromptsTokenizeLikeLlamaCpp) {
  // The forward-pass reference feeds llama.cpp these prompt ids; spanc's
  // own tokenization of the same texts must give the same ids.
  nlohmann::json reference = loadReference("greedy_smollm2.json");
  ASSERT_GE(reference["cases"].size(), 8u);
  for (const nlohmann::json &item : reference["cases"]) {
    std::string text = item["prompt_text"];
    std::vector<int32_t> expected = item["prompt_ids"];
    EXPECT_EQ(tokenizer->encode(text, true), expected) << item["name"];
  }
}

TEST_F(SmolLM2Tokenizer, Llama3AndQwen2PreTokenizersMatchLlamaCpp) {
  // No Llama 3 or Qwen2 model is installed, so their pre-tokenizers run on
  // SmolLM2's vocabulary with tokenizer.ggml.pre replaced, exactly as
  // derive_vocabulary.py made the files llama-tokenize read.
  for (const char *pre : {"llama-bpe", "qwen2"}) {
    GgufWriter writer;
    for (const GgufMetadataEntry &entry : file->metadata())
      if (llvm::StringRef(entry.key).startswith("tokenizer.ggml."))
        writer.add(entry.key, entry.key == "tokenizer.ggml.pre"
                                  ? GgufWriterValue::string(pre)
                                  : GgufWriterValue::fromValue(entry.value));
    auto derived = GgufFile::openBuffer(writer.write(), pre);
    ASSERT_TRUE(static_cast<bool>(derived));
    auto other = Tokenizer::fromGguf(**derived);
    ASSERT_TRUE(static_cast<bool>(other)) << llvm::toString(other.takeError());
    EXPECT_EQ((*other)->preTokenizer(), pre);
    std::string name = std::string("tokenizer_smollm2_vocab_") +
                       (std::string(pre) == "qwen2" ? "qwen2" : "llama_bpe") +
                       ".json";
    nlohmann::json reference = loadReference(name);
    ASSERT_GE(reference["cases"].size(), 30u);
    for (const nlohmann::json &item : reference["cases"]) {
      std::string text = item["text"];
      std::vector<int32_t> expected = item["ids"];
      EXPECT_EQ((*other)->encode(text, item["parse_special"]), expected)
          << pre << " " << item["name"];
    }
  }
}

TEST_F(SmolLM2Tokenizer, SentencePieceMatchesLlamaCppOnADerivedVocabulary) {
  // SentencePiece on a real-sized vocabulary (see SyntheticVocabulary.h):
  // score-ordered merges, the space prefix, U+2581 and byte fallback, all
  // against llama-tokenize's ids for the same derived file.
  auto writer = deriveSentencePieceVocabulary(*file);
  ASSERT_TRUE(static_cast<bool>(writer)) << llvm::toString(writer.takeError());
  auto derived = GgufFile::openBuffer(writer->write(), "spm");
  ASSERT_TRUE(static_cast<bool>(derived));
  auto spm = Tokenizer::fromGguf(**derived);
  ASSERT_TRUE(static_cast<bool>(spm)) << llvm::toString(spm.takeError());
  EXPECT_EQ((*spm)->kind(), TokenizerKind::SentencePiece);
  nlohmann::json reference = loadReference("tokenizer_smollm2_vocab_spm.json");
  ASSERT_GE(reference["cases"].size(), 30u);
  for (const nlohmann::json &item : reference["cases"]) {
    std::string text = item["text"];
    std::vector<int32_t> expected = item["ids"];
    std::vector<int32_t> ids = (*spm)->encode(text, item["parse_special"]);
    EXPECT_EQ(ids, expected) << item["name"];
    EXPECT_EQ((*spm)->decode(ids), text) << item["name"];
  }
}

TEST_F(SmolLM2Tokenizer, RandomTextRoundTripsAndBytesNeverCrash) {
  // Seeded random strings built from pieces that stress the pre-tokenizer
  // (spaces, digits, apostrophes, multi-byte letters, emoji, specials):
  // valid UTF-8 must decode back exactly; arbitrary bytes must not crash.
  const char *pieces[] = {" ",          "  ",
                          "\n",         "\t",
                          "a",          "Z",
                          "é",          "ß",
                          "你",         "🍕",
                          "1",          "23",
                          "'s",         "'",
                          "!",          ".",
                          "-",          "_",
                          "\r\n",       "\u00a0",
                          "<|im_end|>", "<|im_start|>",
                          "ab",         "The"};
  std::mt19937 random(12345);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string text;
    int length = static_cast<int>(random() % 40);
    for (int i = 0; i < length; ++i)
      text += pieces[random() % (sizeof(pieces) / sizeof(pieces[0]))];
    bool parseSpecial = random() % 2;
    std::vector<int32_t> ids = tokenizer->encode(text, parseSpecial);
    ASSERT_EQ(tokenizer->decode(ids), text) << text;
    std::string bytes;
    for (int i = 0; i < length; ++i)
      bytes += static_cast<char>(random() % 256);
    ids = tokenizer->encode(bytes, parseSpecial);
    for (int32_t id : ids)
      ASSERT_TRUE(id >= 0 && id < tokenizer->vocabSize());
  }
}

TEST_F(SmolLM2Tokenizer, DecodesBackToTheText) {
  nlohmann::json reference = loadReference("tokenizer_smollm2.json");
  for (const nlohmann::json &item : reference["cases"]) {
    std::string text = item["text"];
    std::vector<int32_t> ids = item["ids"];
    EXPECT_EQ(tokenizer->decode(ids), text) << item["name"];
  }
}

TEST_F(SmolLM2Tokenizer, KnowsItsSpecialTokens) {
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::BytePairEncoding);
  EXPECT_EQ(tokenizer->preTokenizer(), "smollm");
  EXPECT_EQ(tokenizer->vocabSize(), 49152);
  EXPECT_EQ(tokenizer->tokenText(1), "<|im_start|>");
  EXPECT_EQ(tokenizer->tokenText(2), "<|im_end|>");
  EXPECT_EQ(tokenizer->tokenType(1), TokenType::Control);
  EXPECT_TRUE(tokenizer->isEndOfGeneration(2));
  EXPECT_TRUE(tokenizer->isEndOfGeneration(0)); // <|endoftext|>
  EXPECT_FALSE(tokenizer->isEndOfGeneration(1));
  EXPECT_EQ(tokenizer->tokenToPiece(2, /*renderSpecial=*/false), "");
}

TEST_F(SmolLM2Tokenizer, Tokenizes100KilobytesAndALongWordLosslessly) {
  nlohmann::json reference = loadReference("tokenizer_smollm2.json");
  std::string text;
  while (text.size() < 100 * 1024)
    for (const nlohmann::json &item : reference["cases"])
      text += item["text"].get<std::string>() + "\n";
  // One long word, too: a quadratic merge loop shows up here.
  text += std::string(20000, 'a');
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tokenizer->encode(text, true);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GT(ids.size(), 20000u);
  EXPECT_EQ(tokenizer->decode(ids), text);
  std::printf("tokenized %zu bytes into %zu tokens in %.3f s\n", text.size(),
              ids.size(), seconds);
  // The time is printed, not asserted: speed is the benchmarks' business
  // (a quadratic merge would make this test hit Bazel's timeout).
}

TEST(Tokenizer, BpeMergesByRankNotByPosition) {
  // Merges: rank 0 "b c", rank 1 "a b". In "abc" the higher-priority "b c"
  // wins although "a b" comes first in the text: a + bc.
  auto tokenizer = syntheticBpe({"bc", "ab"}, {"b c", "a b"});
  std::vector<int32_t> ids = tokenizer->encode("abc", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tokenizer->tokenText(ids[0]), "a");
  EXPECT_EQ(tokenizer->tokenText(ids[1]), "bc");
  // Equal rank cannot happen; leftmost wins among repeats: "abab" -> ab ab.
  ids = tokenizer->encode("abab", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tokenizer->tokenText(ids[0]), "ab");
}

TEST(Tokenizer, BpeSpacesUseTheByteAlphabet) {
  // " a" is Ġa after byte encoding; the merge applies only with the space.
  auto tokenizer = syntheticBpe({"\xc4\xa0"
                                 "a"},
                                {"\xc4\xa0 a"});
  std::vector<int32_t> ids = tokenizer->encode("a a", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tokenizer->tokenText(ids[0]), "a");
  EXPECT_EQ(tokenizer->tokenText(ids[1]), "\xc4\xa0"
                                          "a");
  EXPECT_EQ(tokenizer->tokenToPiece(ids[1]), " a");
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("é\n", false)), "é\n");
}

TEST(Tokenizer, ControlTokensNeedParseSpecialUserDefinedDoNot) {
  auto tokenizer = syntheticBpe({}, {});
  int32_t start = *tokenizer->findToken("<|im_start|>");
  int32_t tool = *tokenizer->findToken("<tool>");
  std::vector<int32_t> parsed = tokenizer->encode("<|im_start|>x<tool>", true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{start, 'x', tool}));
  std::vector<int32_t> plain = tokenizer->encode("<|im_start|>x<tool>", false);
  EXPECT_EQ(plain.size(), 12u + 1 + 1); // 12 characters, x, <tool>
  EXPECT_EQ(plain.back(), tool);
  EXPECT_EQ(tokenizer->eosId(), start + 1);
  EXPECT_TRUE(tokenizer->isEndOfGeneration(start + 1));
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  auto tokenizer = syntheticBpe({}, {});
  // 0xff is never valid UTF-8: llama.cpp reads it as U+FFFD (EF BF BD).
  std::vector<int32_t> ids = tokenizer->encode("a\xff", false);
  EXPECT_EQ(tokenizer->decode(ids), "a\xef\xbf\xbd");
}

TEST(Tokenizer, SentencePieceMergesByScoreWithByteFallback) {
  // Vocabulary: <unk> <s> </s>, byte tokens for 'x' only, pieces with
  // scores. "▁hello" is built from ▁ h e l l o by the best-scoring merges.
  std::vector<std::string> tokens = {"<unk>",
                                     "<s>",
                                     "</s>",
                                     "<0x21>",
                                     "\xe2\x96\x81",
                                     "h",
                                     "e",
                                     "l",
                                     "o",
                                     "\xe2\x96\x81h",
                                     "el",
                                     "ll",
                                     "lo",
                                     "\xe2\x96\x81he",
                                     "llo",
                                     "\xe2\x96\x81hello"};
  std::vector<float> scores = {0,  0,  0,  0,  -1, -2,    -2,    -2,
                               -2, -3, -5, -4, -6, -3.5f, -4.5f, -1};
  std::vector<int32_t> types = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "llama");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addFloat32Array("tokenizer.ggml.scores", scores);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  auto file = GgufFile::openBuffer(writer.write(), "spm.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  // ▁ h e l l o: pairs scored ▁h -3, el -5, ll -4, lo -6; best ▁h ->
  // ▁h e l l o; new pair ▁he -3.5 -> ▁he l l o; ll -4 -> ▁he ll o; llo
  // -4.5 -> ▁he llo; ▁hello -1 -> ▁hello.
  std::vector<int32_t> ids = (*tokenizer)->encode("hello", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{15}));
  // '!' has a byte token, '?' has none (-> <unk>); a space is prefixed.
  ids = (*tokenizer)->encode("he!?", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{13, 3, 0}));
  EXPECT_EQ((*tokenizer)->decode({15}), "hello");
  EXPECT_EQ((*tokenizer)->decode({13, 3}), "he!");
  // A control token resets the space prefix, as in llama.cpp.
  ids = (*tokenizer)->encode("</s>hello", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 15}));
  EXPECT_EQ((*tokenizer)->bosId(), 1);
  EXPECT_TRUE((*tokenizer)->addBosByDefault());
}

TEST(Tokenizer, ByteLevelBpeWithoutAByteTokenIsRefused) {
  // Issue 25: SmolLM2's vocabulary without "H" encoded "Hello World" as
  // "ello World": byte-level BPE has no unknown token to fall back to.
  auto file = GgufFile::openBuffer(bpeVocabulary({}, {}, "gpt-2", 'H').write(),
                                   "b.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(Tokenizer::fromGguf(**file).takeError()),
            "b.gguf: tokenizer.ggml.tokens has no token for byte 0x48 'H' "
            "('H' in the byte-level alphabet): text holding it cannot be "
            "encoded (a byte-level BPE vocabulary needs one for every byte "
            "of text)");
  // Bytes valid UTF-8 never holds (0xC0, 0xC1, 0xF5-0xFF) are not needed:
  // encode() has replaced them by U+FFFD before.
  file = GgufFile::openBuffer(bpeVocabulary({}, {}, "gpt-2", 0xff).write(),
                              "b.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)->decode((*tokenizer)->encode("Hello\xff", false)),
            "Hello\xef\xbf\xbd");
}

TEST(Tokenizer, ByteLevelBpeReplacesAControlByteItCannotSpell) {
  // SmolLM2's vocabulary has no token for 0x04 (nor 0x06, 0x13, 0x14,
  // 0x16, 0x1D, 0xF1, 0xF2): such a character becomes U+FFFD, as invalid
  // UTF-8 does, instead of vanishing.
  auto file = GgufFile::openBuffer(bpeVocabulary({}, {}, "gpt-2", 0x04).write(),
                                   "b.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)
                ->decode((*tokenizer)
                             ->encode("a\x04"
                                      "b",
                                      false)),
            "a\xef\xbf\xbd"
            "b");
  // A four-byte character whose lead byte has no token: one U+FFFD.
  file = GgufFile::openBuffer(bpeVocabulary({}, {}, "gpt-2", 0xf1).write(),
                              "b.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)
                ->decode((*tokenizer)
                             ->encode("a\xf1\x80\x80\x80"
                                      "b",
                                      false)),
            "a\xef\xbf\xbd"
            "b");
}

TEST_F(SmolLM2Tokenizer, ControlBytesWithoutATokenBecomeReplacementCharacters) {
  // Dropped before (as llama.cpp drops them): "a", 0x04, "b" encoded as
  // "ab".
  std::vector<int32_t> ids = tokenizer->encode("a\x04"
                                               "b",
                                               false);
  EXPECT_EQ(tokenizer->decode(ids), "a\xef\xbf\xbd"
                                    "b");
}

/// A SentencePiece vocabulary: `unknown` (type 2) or "<s>", then "</s>",
/// "\xe2\x96\x81" and "a", with byte tokens for the bytes listed.
std::string spmVocabulary(bool withUnknown, const std::vector<int> &bytes) {
  std::vector<std::string> tokens = {withUnknown ? "<unk>" : "<pad>", "<s>",
                                     "</s>", "\xe2\x96\x81", "a"};
  std::vector<int32_t> types = {withUnknown ? 2 : 3, 3, 3, 1, 1};
  for (int byte : bytes) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    tokens.push_back(name);
    types.push_back(6);
  }
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "llama");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addFloat32Array("tokenizer.ggml.scores",
                         std::vector<float>(tokens.size(), 0.0f));
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  return writer.write();
}

TEST(Tokenizer, SentencePieceWithoutByteTokensNeedsAnUnknownToken) {
  // Without byte tokens or an unknown token a character it cannot spell
  // had nothing to become (token 0, whatever it was, stood for it).
  auto file = GgufFile::openBuffer(spmVocabulary(false, {}), "s.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(Tokenizer::fromGguf(**file).takeError()),
            "s.gguf: tokenizer.ggml.tokens has no byte token <0x00> (and 242 "
            "other bytes), and no unknown token "
            "(tokenizer.ggml.unknown_token_id, of token type unknown) to "
            "stand for it: text holding it cannot be encoded");
  // With an unknown token, as SentencePiece models trained without byte
  // fallback: an unspellable character becomes <unk>, visibly.
  file = GgufFile::openBuffer(spmVocabulary(true, {}), "s.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)->encode("aHa", false),
            (std::vector<int32_t>{3, 4, 0, 4}));
  // With every byte token, none is needed.
  std::vector<int> all;
  for (int byte = 0; byte < 256; ++byte)
    all.push_back(byte);
  file = GgufFile::openBuffer(spmVocabulary(false, all), "s.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)->decode((*tokenizer)->encode("aHa", false)), "aHa");
}

TEST(Tokenizer, NonFiniteScoresAreRefused) {
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "llama");
  writer.addStringArray("tokenizer.ggml.tokens", {"<unk>", "a"});
  writer.addFloat32Array("tokenizer.ggml.scores", {0.0f, std::nanf("")});
  writer.addInt32Array("tokenizer.ggml.token_type", {2, 1});
  auto file = GgufFile::openBuffer(writer.write(), "s.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(Tokenizer::fromGguf(**file).takeError()),
            "s.gguf: tokenizer.ggml.scores entry 1 (token 'a') is not finite");
}

TEST(Tokenizer, RejectsBadMetadata) {
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "wordpiece");
  auto file = GgufFile::openBuffer(writer.write(), "bad.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(Tokenizer::fromGguf(**file).takeError()),
            "bad.gguf: unsupported tokenizer.ggml.model 'wordpiece' "
            "(supported: gpt2, llama)");

  GgufWriter outOfRange;
  outOfRange.addString("tokenizer.ggml.model", "llama");
  outOfRange.addStringArray("tokenizer.ggml.tokens", {"a"});
  outOfRange.addUInt32("tokenizer.ggml.eos_token_id", 5);
  file = GgufFile::openBuffer(outOfRange.write(), "bad.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(Tokenizer::fromGguf(**file).takeError()),
            "bad.gguf: tokenizer.ggml.eos_token_id is 5, outside the "
            "vocabulary of 1 tokens");
}
