//===- SyntheticVocabulary.cpp - SentencePiece vocabulary for tests -------===//

#include "test/unit/model/SyntheticVocabulary.h"

#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/StringSet.h"

#include <cstdio>

namespace spanc::model {

namespace {

bool isValidUtf8(llvm::StringRef text) {
  size_t offset = 0;
  while (offset < text.size()) {
    unsigned char lead = text[offset];
    size_t length = lead < 0x80             ? 1
                    : (lead & 0xe0) == 0xc0 ? 2
                    : (lead & 0xf0) == 0xe0 ? 3
                    : (lead & 0xf8) == 0xf0 ? 4
                                            : 0;
    if (length == 0 || offset + length > text.size())
      return false;
    for (size_t i = 1; i < length; ++i)
      if ((static_cast<unsigned char>(text[offset + i]) & 0xc0) != 0x80)
        return false;
    offset += length;
  }
  return true;
}

} // namespace

llvm::Expected<GgufWriter>
deriveSentencePieceVocabulary(const GgufFile &source) {
  auto bpe = Tokenizer::fromGguf(source);
  if (!bpe)
    return bpe.takeError();
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0.0f, 0.0f, 0.0f};
  std::vector<int32_t> types = {2, 3, 3};
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    tokens.push_back(name);
    scores.push_back(0.0f);
    types.push_back(6);
  }
  llvm::StringSet<> seen;
  for (const std::string &token : tokens)
    seen.insert(token);
  for (int32_t id = 0; id < (*bpe)->vocabSize(); ++id) {
    if ((*bpe)->tokenType(id) != TokenType::Normal)
      continue;
    std::string piece = (*bpe)->tokenToPiece(id);
    if (piece.empty() || !isValidUtf8(piece))
      continue;
    std::string text;
    for (char c : piece) {
      if (c == ' ')
        text += "\xe2\x96\x81";
      else
        text += c;
    }
    if (!seen.insert(text).second)
      continue;
    tokens.push_back(text);
    scores.push_back(-static_cast<float>(id + 1));
    types.push_back(1);
  }

  GgufWriter writer;
  for (const GgufMetadataEntry &entry : source.metadata())
    if (!llvm::StringRef(entry.key).startswith("tokenizer."))
      writer.add(entry.key, GgufWriterValue::fromValue(entry.value));
  writer.addString("tokenizer.ggml.model", "llama");
  writer.addStringArray("tokenizer.ggml.tokens", tokens);
  writer.addFloat32Array("tokenizer.ggml.scores", scores);
  writer.addInt32Array("tokenizer.ggml.token_type", types);
  writer.addUInt32("tokenizer.ggml.bos_token_id", 1);
  writer.addUInt32("tokenizer.ggml.eos_token_id", 2);
  writer.addUInt32("tokenizer.ggml.unknown_token_id", 0);
  writer.addBool("tokenizer.ggml.add_space_prefix", true);
  writer.addBool("tokenizer.ggml.add_bos_token", false);
  return writer;
}

} // namespace spanc::model
