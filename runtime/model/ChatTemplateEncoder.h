//===- ChatTemplateEncoder.h - A model's chat template as MessageEncoder --===//
#ifndef SPANC_RUNTIME_MODEL_CHATTEMPLATEENCODER_H
#define SPANC_RUNTIME_MODEL_CHATTEMPLATEENCODER_H

#include "plan/MessageEncoder.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Tokenizer.h"

namespace spanc::model {

/// Messages through the model's chat template; fragments as plain text
/// followed by a blank line, so consecutive fragments stay apart.
class ChatTemplateEncoder : public plan::MessageEncoder {
public:
  ChatTemplateEncoder(const ChatTemplate &chatTemplate,
                      const Tokenizer &tokenizer)
      : chatTemplate(chatTemplate), tokenizer(tokenizer) {}

  llvm::Expected<std::vector<plan::TokenId>>
  encodeMessage(plan::MessageRole role, llvm::StringRef content) const override;
  std::vector<plan::TokenId>
  encodeFragment(llvm::StringRef text) const override;
  std::vector<plan::TokenId> assistantHeader() const override {
    return chatTemplate.assistantHeader();
  }
  std::vector<plan::TokenId> endOfTurn() const override {
    return chatTemplate.endOfTurnTokens();
  }

private:
  const ChatTemplate &chatTemplate;
  const Tokenizer &tokenizer;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_CHATTEMPLATEENCODER_H
