//===- DesugarChat.cpp - C(m...) -> G(cross(m...)) ------------------------===//
//
// A chat completion is a generate over its messages in order. After this
// pass no span.chat is left; the gen keeps the chat's options and location.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

namespace spanc::passes {

namespace {

class DesugarChatPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &) override {
    llvm::SmallVector<ir::Op *, 16> chats;
    for (auto &query : module.getQueries()) {
      chats.clear();
      for (ir::Op &op : query->getOps())
        if (op.getKind() == ir::OpKind::Chat)
          chats.push_back(&op);
      for (ir::Op *chat : chats)
        rewrite(chat);
    }
    return true;
  }

private:
  static void rewrite(ir::Op *chat) {
    ir::Builder builder;
    builder.setInsertionPoint(chat);
    builder.setLoc(chat->getLoc());
    ir::Op *messages = builder.createCross(chat->getOperands());
    ir::Op *gen = builder.createGen(messages, chat->getAttributes());
    chat->replaceAllUsesWith(gen);
    chat->erase();
  }
};

} // namespace

std::unique_ptr<Pass> createDesugarChatPass() {
  return std::make_unique<DesugarChatPass>();
}

static PassRegistration
    registration("desugar-chat",
                 "chat(m...) -> gen(cross(m...)), keeping the chat's options",
                 createDesugarChatPass);

} // namespace spanc::passes
