//===- MessageEncoder.h - What codegen needs from a chat template ---------===//
//
// Codegen tokenizes each message on its own, through the model's chat
// template, so that a message's tokens never depend on its neighbours. This
// is the narrow view of the template it needs; runtime/model's
// ChatTemplateEncoder provides it for real models. It lives here, at the
// bottom, so that the runtime can implement it without including codegen.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PLAN_MESSAGEENCODER_H
#define SPANC_PLAN_MESSAGEENCODER_H

#include "plan/Segment.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace spanc::plan {

enum class MessageRole { System, User, Assistant };

class MessageEncoder {
public:
  virtual ~MessageEncoder();
  /// The whole message: role header, content, end of turn.
  virtual llvm::Expected<std::vector<TokenId>>
  encodeMessage(MessageRole role, llvm::StringRef content) const = 0;
  /// A corpus fragment: plain text, no chat role.
  virtual std::vector<TokenId> encodeFragment(llvm::StringRef text) const = 0;
  /// The tokens a generation starts after (the assistant header).
  virtual std::vector<TokenId> assistantHeader() const = 0;
  /// The tokens that close an assistant message after its content.
  virtual std::vector<TokenId> endOfTurn() const = 0;
};

} // namespace spanc::plan

#endif // SPANC_PLAN_MESSAGEENCODER_H
