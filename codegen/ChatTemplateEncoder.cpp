//===- ChatTemplateEncoder.cpp - A model's chat template as MessageEncoder ===//

#include "codegen/ChatTemplateEncoder.h"

namespace spanc::codegen {

llvm::Expected<std::vector<plan::TokenId>>
ChatTemplateEncoder::encodeMessage(MessageRole role,
                                   llvm::StringRef content) const {
  const char *roleName = role == MessageRole::System ? "system"
                         : role == MessageRole::User ? "user"
                                                     : "assistant";
  return chatTemplate.encodeMessage(roleName, content);
}

std::vector<plan::TokenId>
ChatTemplateEncoder::encodeFragment(llvm::StringRef text) const {
  std::string separated = text.rtrim().str() + "\n\n";
  return tokenizer.encode(separated, /*parseSpecial=*/false);
}

} // namespace spanc::codegen
