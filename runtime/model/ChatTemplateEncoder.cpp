//===- ChatTemplateEncoder.cpp - A model's chat template as MessageEncoder ===//

#include "runtime/model/ChatTemplateEncoder.h"

namespace spanc::model {

llvm::Expected<std::vector<plan::TokenId>>
ChatTemplateEncoder::encodeMessage(plan::MessageRole role,
                                   llvm::StringRef content) const {
  const char *roleName = role == plan::MessageRole::System ? "system"
                         : role == plan::MessageRole::User ? "user"
                                                           : "assistant";
  return chatTemplate.encodeMessage(roleName, content);
}

std::vector<plan::TokenId>
ChatTemplateEncoder::encodeFragment(llvm::StringRef text) const {
  std::string separated = text.rtrim().str() + "\n\n";
  return tokenizer.encode(separated, /*parseSpecial=*/false);
}

} // namespace spanc::model
