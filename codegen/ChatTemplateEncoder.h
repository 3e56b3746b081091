//===- ChatTemplateEncoder.h - A model's chat template as MessageEncoder --===//
#ifndef SPANC_CODEGEN_CHATTEMPLATEENCODER_H
#define SPANC_CODEGEN_CHATTEMPLATEENCODER_H

#include "codegen/MessageEncoder.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Tokenizer.h"

namespace spanc::codegen {

/// Messages through the model's chat template; fragments as plain text
/// followed by a blank line, so consecutive fragments stay apart.
class ChatTemplateEncoder : public MessageEncoder {
public:
  ChatTemplateEncoder(const model::ChatTemplate &chatTemplate,
                      const model::Tokenizer &tokenizer)
      : chatTemplate(chatTemplate), tokenizer(tokenizer) {}

  llvm::Expected<std::vector<plan::TokenId>>
  encodeMessage(MessageRole role, llvm::StringRef content) const override;
  std::vector<plan::TokenId> encodeFragment(llvm::StringRef text) const override;
  std::vector<plan::TokenId> assistantHeader() const override {
    return chatTemplate.assistantHeader();
  }
  std::vector<plan::TokenId> endOfTurn() const override {
    return chatTemplate.endOfTurnTokens();
  }

private:
  const model::ChatTemplate &chatTemplate;
  const model::Tokenizer &tokenizer;
};

} // namespace spanc::codegen

#endif // SPANC_CODEGEN_CHATTEMPLATEENCODER_H
