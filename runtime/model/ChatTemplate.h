//===- ChatTemplate.h - Per-message chat formatting as token ids ----------===//
//
// The chat formats of the supported families, detected from the GGUF's
// `tokenizer.chat_template` by its marker tokens (not a Jinja engine):
//   ChatML  (SmolLM2, Qwen2)  <|im_start|>ROLE\nCONTENT<|im_end|>\n
//   Llama 3                   <|start_header_id|>ROLE<|end_header_id|>\n\n
//                             CONTENT<|eot_id|>
//   Llama 2 / Mistral         <s>[INST] USER [/INST] ASSISTANT </s>
// Each message is tokenized on its own, so its ids never depend on its
// neighbours: a span can be cached once and reused anywhere. Markers are
// emitted as their special ids; message content is tokenized with special
// parsing off, so text cannot forge a control token.
//
// Deliberate differences from the Jinja templates, all for per-message
// independence:
//  - Default system prompts (SmolLM2 injects "You are a helpful AI
//    assistant named SmolLM..." when a conversation has no system message)
//    are not injected here: whether to add one depends on the other
//    messages. defaultSystemPrompt() exposes the template's text so the
//    caller can add it as an ordinary system message at the query level.
//  - BOS belongs to the sequence, not to a message: sequencePrefix().
//  - Llama 2 folds the system prompt into the first user turn; here a
//    system message is its own [INST] <<SYS>>...<</SYS>> [/INST] turn.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_CHATTEMPLATE_H
#define SPANC_RUNTIME_MODEL_CHATTEMPLATE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spanc::model {

class GgufFile;
class Tokenizer;

enum class ChatTemplateKind { ChatML, Llama3, Llama2 };

const char *chatTemplateKindName(ChatTemplateKind kind);

class ChatTemplate {
public:
  /// The family a Jinja template text belongs to, by its markers.
  static std::optional<ChatTemplateKind>
  detectKind(llvm::StringRef templateText);

  /// The template of a model: detected from `tokenizer.chat_template`.
  /// Fails (naming the key) when it is absent or not a known family.
  static llvm::Expected<ChatTemplate> fromGguf(const GgufFile &file,
                                               const Tokenizer &tokenizer);
  /// A template of a given family over `tokenizer`'s vocabulary; fails when
  /// a marker token is missing from it.
  static llvm::Expected<ChatTemplate> create(ChatTemplateKind kind,
                                             const Tokenizer &tokenizer);

  ChatTemplateKind kind() const { return templateKind; }

  /// All token ids of one message, header and footer included. Roles:
  /// system, user, assistant (ChatML and Llama 3 accept any role name).
  llvm::Expected<std::vector<int32_t>>
  encodeMessage(llvm::StringRef role, llvm::StringRef content) const;
  /// The ids after which the model generates an assistant message.
  std::vector<int32_t> assistantHeader() const;
  /// The ids that close an assistant message after its generated content
  /// (so a generated span becomes a complete message).
  std::vector<int32_t> endOfTurnTokens() const;
  /// Ids that end generation for this format.
  std::vector<int32_t> stopTokens() const;
  /// Ids a whole prompt starts with (BOS where the family uses one).
  std::vector<int32_t> sequencePrefix() const;
  /// The system prompt the Jinja template injects when a conversation has
  /// none, if any (see the file comment).
  const std::optional<std::string> &defaultSystemPrompt() const {
    return defaultSystem;
  }

private:
  ChatTemplate(ChatTemplateKind kind, const Tokenizer &tokenizer)
      : templateKind(kind), tokenizer(&tokenizer) {}

  ChatTemplateKind templateKind;
  const Tokenizer *tokenizer;
  std::optional<std::string> defaultSystem;
  // Marker ids (ChatML: start/end; Llama 3: header start/end, eot, bos;
  // Llama 2: bos/eos).
  int32_t beginId = -1, endId = -1, headerStartId = -1, headerEndId = -1;
  int32_t bosId = -1;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_CHATTEMPLATE_H
