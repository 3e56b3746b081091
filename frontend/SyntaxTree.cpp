//===- SyntaxTree.cpp - Parse .span source into ANTLR's parse tree --------===//

#include "frontend/SyntaxTree.h"

#include "grammar/SpanLexer.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"

namespace spanc::frontend {

llvm::SMLoc locationFor(const llvm::SourceMgr &sourceMgr, unsigned bufferId,
                        size_t line, size_t codePointColumn) {
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(bufferId);
  const char *cursor = buffer->getBufferStart();
  const char *end = buffer->getBufferEnd();
  for (size_t current = 1; current < line && cursor < end; ++cursor)
    if (*cursor == '\n')
      ++current;
  // Step over code points, not bytes: skip UTF-8 continuation bytes.
  for (size_t column = 0; column < codePointColumn && cursor < end;) {
    ++cursor;
    if (cursor == end || (static_cast<unsigned char>(*cursor) & 0xC0) != 0x80)
      ++column;
  }
  return llvm::SMLoc::getFromPointer(cursor);
}

class SyntaxErrorListener : public antlr4::BaseErrorListener {
public:
  explicit SyntaxErrorListener(SyntaxTree &tree) : tree(tree) {}

  void syntaxError(antlr4::Recognizer *, antlr4::Token *, size_t line,
                   size_t column, const std::string &message,
                   std::exception_ptr) override {
    ++tree.syntaxErrors;
    tree.sourceMgr->PrintMessage(
        locationFor(*tree.sourceMgr, tree.bufferId, line, column),
        llvm::SourceMgr::DK_Error, message);
  }

private:
  SyntaxTree &tree;
};

std::unique_ptr<SyntaxTree> SyntaxTree::parse(llvm::SourceMgr &sourceMgr,
                                              unsigned bufferId) {
  std::unique_ptr<SyntaxTree> tree(new SyntaxTree());
  tree->sourceMgr = &sourceMgr;
  tree->bufferId = bufferId;
  tree->input = std::make_unique<antlr4::ANTLRInputStream>(
      sourceMgr.getMemoryBuffer(bufferId)->getBuffer().str());
  tree->lexer = std::make_unique<grammar::SpanLexer>(tree->input.get());
  tree->tokens =
      std::make_unique<antlr4::CommonTokenStream>(tree->lexer.get());
  tree->parser = std::make_unique<grammar::SpanParser>(tree->tokens.get());
  tree->errorListener = std::make_unique<SyntaxErrorListener>(*tree);
  tree->lexer->removeErrorListeners();
  tree->lexer->addErrorListener(tree->errorListener.get());
  tree->parser->removeErrorListeners();
  tree->parser->addErrorListener(tree->errorListener.get());
  tree->moduleContext = tree->parser->module();
  return tree;
}

SyntaxTree::~SyntaxTree() = default;

llvm::SMLoc SyntaxTree::locationOf(const antlr4::Token *token) const {
  return locationFor(*sourceMgr, bufferId, token->getLine(),
                     token->getCharPositionInLine());
}

std::string SyntaxTree::toStringTree() const {
  return moduleContext->toStringTree(parser.get());
}

} // namespace spanc::frontend
