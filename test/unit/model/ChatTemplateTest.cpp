//===- ChatTemplateTest.cpp - Per-message chat formats as token ids -------===//
//
// ChatML is checked on SmolLM2 against llama.cpp's ids for the rendered
// prompt (tokenizer reference set); Llama 3 and Llama 2 use synthetic
// vocabularies made with GgufWriter (no such model is installed), where the
// expected layout is written out by hand.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/GgufWriter.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"
#include <nlohmann/json.hpp>

#include <cstdlib>

using namespace spanc::model;

namespace {

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> ids;
  for (const std::vector<int32_t> &part : parts)
    ids.insert(ids.end(), part.begin(), part.end());
  return ids;
}

std::vector<int32_t> unwrap(llvm::Expected<std::vector<int32_t>> ids) {
  EXPECT_TRUE(static_cast<bool>(ids));
  if (!ids) {
    ADD_FAILURE() << llvm::toString(ids.takeError());
    return {};
  }
  return *ids;
}

/// GPT-2 alphabet token for one ASCII byte (printable bytes are themselves;
/// space is U+0120, newline U+010A).
std::string byteToken(int byte) {
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable =
        (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    int codePoint = printable ? b : next++;
    if (b != byte)
      continue;
    std::string text;
    if (codePoint < 0x80) {
      text += static_cast<char>(codePoint);
    } else {
      text += static_cast<char>(0xc0 | (codePoint >> 6));
      text += static_cast<char>(0x80 | (codePoint & 0x3f));
    }
    return text;
  }
  return "";
}

struct Synthetic {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

/// A Llama 3 style vocabulary: 256 byte tokens (id = byte), then specials.
Synthetic llama3Vocabulary() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int byte = 0; byte < 256; ++byte) {
    tokens.push_back(byteToken(byte));
    types.push_back(1);
  }
  for (const char *special : {"<|begin_of_text|>", "<|start_header_id|>",
                              "<|end_header_id|>", "<|eot_id|>"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "gpt2");
  writer.addString("tokenizer.ggml.pre", "llama-bpe");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  writer.addStringArray("tokenizer.ggml.merges", {});
  writer.addUInt32("tokenizer.ggml.bos_token_id", 256);
  writer.addUInt32("tokenizer.ggml.eos_token_id", 259);
  writer.addString("tokenizer.chat_template",
                   "{{- bos_token }}{% for message in messages %}"
                   "{{ '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] | trim + "
                   "'<|eot_id|>' }}{% endfor %}");
  Synthetic result;
  auto file = GgufFile::openBuffer(writer.write(), "llama3.gguf");
  EXPECT_TRUE(static_cast<bool>(file));
  result.file = std::move(*file);
  auto tokenizer = Tokenizer::fromGguf(*result.file);
  EXPECT_TRUE(static_cast<bool>(tokenizer))
      << llvm::toString(tokenizer.takeError());
  result.tokenizer = std::move(*tokenizer);
  return result;
}

std::vector<int32_t> bytes(llvm::StringRef text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text)
    ids.push_back(c);
  return ids;
}

} // namespace

TEST(ChatTemplate, DetectsFamiliesByMarkers) {
  EXPECT_EQ(ChatTemplate::detectKind("{{'<|im_start|>' + role}}"),
            ChatTemplateKind::ChatML);
  EXPECT_EQ(ChatTemplate::detectKind(
                "<|start_header_id|>{{role}}<|end_header_id|>...<|eot_id|>"),
            ChatTemplateKind::Llama3);
  EXPECT_EQ(ChatTemplate::detectKind("{{ bos_token + '[INST] ' + content + "
                                     "' [/INST]' }}"),
            ChatTemplateKind::Llama2);
  EXPECT_EQ(ChatTemplate::detectKind("{{ content }}"), std::nullopt);
}

TEST(ChatTemplate, ChatMLOnSmolLM2MatchesLlamaCppIdsOfTheRenderedPrompt) {
  const char *root = std::getenv("SPANC_ROOT");
  std::string path = std::string(root ? root : ".") +
                     "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!llvm::sys::fs::exists(path))
    GTEST_SKIP() << "model not installed (tools/setup.sh): " << path;
  auto file = GgufFile::open(path);
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer));
  auto chat = ChatTemplate::fromGguf(**file, **tokenizer);
  ASSERT_TRUE(static_cast<bool>(chat)) << llvm::toString(chat.takeError());
  EXPECT_EQ(chat->kind(), ChatTemplateKind::ChatML);
  ASSERT_TRUE(chat->defaultSystemPrompt().has_value());
  EXPECT_EQ(*chat->defaultSystemPrompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face");

  // The reference case "special_chatml" is llama-tokenize's ids for
  // "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
  // "Hi!<|im_end|>\n<|im_start|>assistant\n".
  auto buffer =
      llvm::MemoryBuffer::getFile("test/data/reference/tokenizer_smollm2.json");
  ASSERT_TRUE(static_cast<bool>(buffer));
  nlohmann::json reference =
      nlohmann::json::parse((*buffer)->getBuffer().str());
  std::vector<int32_t> expected;
  for (const nlohmann::json &item : reference["cases"])
    if (item["name"] == "special_chatml")
      expected = item["ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(expected.empty());
  std::vector<int32_t> system =
      unwrap(chat->encodeMessage("system", "You are helpful."));
  std::vector<int32_t> user = unwrap(chat->encodeMessage("user", "Hi!"));
  EXPECT_EQ(
      concat({chat->sequencePrefix(), system, user, chat->assistantHeader()}),
      expected);
  // <|im_end|> then "\n" close a turn; generation stops at <|im_end|>.
  EXPECT_EQ(chat->endOfTurnTokens(), (std::vector<int32_t>{2, expected[8]}));
  EXPECT_EQ(chat->stopTokens().front(), 2);
  // Independence: the same message has the same ids whatever precedes it.
  EXPECT_EQ(unwrap(chat->encodeMessage("user", "Hi!")), user);
  // Content cannot forge control tokens.
  std::vector<int32_t> forged =
      unwrap(chat->encodeMessage("user", "<|im_end|>"));
  EXPECT_EQ(std::count(forged.begin(), forged.end(), 2), 1);
}

TEST(ChatTemplate, Llama3LayoutOnASyntheticVocabulary) {
  Synthetic model = llama3Vocabulary();
  auto chat = ChatTemplate::fromGguf(*model.file, *model.tokenizer);
  ASSERT_TRUE(static_cast<bool>(chat)) << llvm::toString(chat.takeError());
  EXPECT_EQ(chat->kind(), ChatTemplateKind::Llama3);
  EXPECT_FALSE(chat->defaultSystemPrompt().has_value());
  const int32_t begin = 256, headerStart = 257, headerEnd = 258, eot = 259;
  // <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>, with
  // content trimmed as the official template does; byte tokens = bytes.
  EXPECT_EQ(unwrap(chat->encodeMessage("user", "  Hi there \n")),
            concat({{headerStart},
                    bytes("user"),
                    {headerEnd},
                    bytes("\n\nHi there"),
                    {eot}}));
  EXPECT_EQ(
      chat->assistantHeader(),
      concat({{headerStart}, bytes("assistant"), {headerEnd}, bytes("\n\n")}));
  EXPECT_EQ(chat->endOfTurnTokens(), (std::vector<int32_t>{eot}));
  EXPECT_EQ(chat->sequencePrefix(), (std::vector<int32_t>{begin}));
  EXPECT_EQ(chat->stopTokens().front(), eot);
}

TEST(ChatTemplate, Llama2LayoutOnASyntheticSentencePieceVocabulary) {
  // SentencePiece vocabulary: <unk> <s> </s>, then single characters (so
  // every character is its own token and the layout is easy to read).
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::string alphabet = "[]INST/<>SYhiokb\n";
  tokens.push_back("\xe2\x96\x81");
  types.push_back(1);
  for (char c : alphabet) {
    tokens.push_back(std::string(1, c));
    types.push_back(1);
  }
  GgufWriter writer;
  writer.addString("tokenizer.ggml.model", "llama");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  writer.addString("tokenizer.chat_template",
                   "{{ bos_token + '[INST] ' + content + ' [/INST]' }}");
  auto file = GgufFile::openBuffer(writer.write(), "llama2.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  auto tokenizer = Tokenizer::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(tokenizer));
  auto chat = ChatTemplate::fromGguf(**file, **tokenizer);
  ASSERT_TRUE(static_cast<bool>(chat)) << llvm::toString(chat.takeError());
  EXPECT_EQ(chat->kind(), ChatTemplateKind::Llama2);
  auto id = [&](llvm::StringRef text) {
    std::vector<int32_t> ids;
    for (char c : text)
      ids.push_back(c == ' ' ? 3 : *(*tokenizer)->findToken(std::string(1, c)));
    return ids;
  };
  // <s> ▁[INST]▁hi▁[/INST] : the space prefix comes from SentencePiece.
  EXPECT_EQ(unwrap(chat->encodeMessage("user", "hi")),
            concat({{1}, id(" [INST] hi [/INST]")}));
  // ▁ok▁</s>
  EXPECT_EQ(unwrap(chat->encodeMessage("assistant", "ok")),
            concat({id(" ok "), {2}}));
  EXPECT_EQ(unwrap(chat->encodeMessage("system", "b")),
            concat({{1}, id(" [INST] <<SYS>>\nb\n<</SYS>> [/INST]")}));
  EXPECT_TRUE(chat->assistantHeader().empty());
  EXPECT_EQ(chat->endOfTurnTokens(), (std::vector<int32_t>{2}));
  auto bad = chat->encodeMessage("tool", "x");
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "llama2 chat template has no role 'tool' (system, user, "
            "assistant)");
}

TEST(ChatTemplate, MissingTemplateNamesTheKey) {
  Synthetic model = llama3Vocabulary();
  GgufWriter writer;
  auto empty = GgufFile::openBuffer(writer.write(), "none.gguf");
  ASSERT_TRUE(static_cast<bool>(empty));
  EXPECT_EQ(llvm::toString(
                ChatTemplate::fromGguf(**empty, *model.tokenizer).takeError()),
            "none.gguf: missing metadata key 'tokenizer.chat_template'");
  // ChatML over a vocabulary without <|im_start|>.
  EXPECT_EQ(llvm::toString(
                ChatTemplate::create(ChatTemplateKind::ChatML, *model.tokenizer)
                    .takeError()),
            "chatml chat template needs token '<|im_start|>', which the "
            "vocabulary lacks");
}
