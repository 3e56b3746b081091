//===- SyntaxTree.cpp - Parse .span source into ANTLR's parse tree --------===//

#include "frontend/SyntaxTree.h"

#include "grammar/SpanLexer.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/ConvertUTF.h"
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

  void syntaxError(antlr4::Recognizer *, antlr4::Token *offendingSymbol,
                   size_t line, size_t column, const std::string &message,
                   std::exception_ptr) override {
    ++tree.syntaxErrors;
    llvm::SMLoc loc =
        offendingSymbol && offendingSymbol->getType() != antlr4::Token::EOF
            ? tree.locationOf(offendingSymbol)
            : tree.locationOf(line, column);
    tree.sourceMgr->PrintMessage(loc, llvm::SourceMgr::DK_Error, message);
  }

private:
  SyntaxTree &tree;
};

std::unique_ptr<SyntaxTree> SyntaxTree::parse(llvm::SourceMgr &sourceMgr,
                                              unsigned bufferId) {
  std::unique_ptr<SyntaxTree> tree(new SyntaxTree());
  tree->sourceMgr = &sourceMgr;
  tree->bufferId = bufferId;
  llvm::StringRef text = sourceMgr.getMemoryBuffer(bufferId)->getBuffer();

  tree->lineStarts.push_back(0);
  bool ascii = true;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n')
      tree->lineStarts.push_back(i + 1);
    if (static_cast<unsigned char>(text[i]) >= 0x80)
      ascii = false;
  }
  if (!ascii) {
    // ANTLR's UTF-8 decoder throws on malformed input; reject it here with
    // a location instead.
    const auto *start = reinterpret_cast<const llvm::UTF8 *>(text.data());
    const llvm::UTF8 *cursor = start;
    const auto *end = start + text.size();
    if (!llvm::isLegalUTF8String(&cursor, end)) {
      ++tree->syntaxErrors;
      sourceMgr.PrintMessage(
          llvm::SMLoc::getFromPointer(text.data() + (cursor - start)),
          llvm::SourceMgr::DK_Error, "invalid UTF-8 in source");
      return tree;
    }
    for (size_t i = 0; i < text.size(); ++i)
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80)
        tree->codePointOffsets.push_back(static_cast<uint32_t>(i));
  }

  tree->input = std::make_unique<antlr4::ANTLRInputStream>(text.str());
  tree->lexer = std::make_unique<grammar::SpanLexer>(tree->input.get());
  tree->tokens = std::make_unique<antlr4::CommonTokenStream>(tree->lexer.get());
  tree->errorListener = std::make_unique<SyntaxErrorListener>(*tree);
  tree->lexer->removeErrorListeners();
  tree->lexer->addErrorListener(tree->errorListener.get());
  tree->tokens->fill();

  // The parser recurses once per nesting level; refuse absurd nesting
  // before it can exhaust the stack.
  unsigned depth = 0;
  for (antlr4::Token *token : tree->tokens->getTokens()) {
    std::string spelling =
        token->getType() == antlr4::Token::EOF ? "" : token->getText();
    if (spelling == "{" || spelling == "(") {
      if (++depth > kMaxNesting) {
        ++tree->syntaxErrors;
        sourceMgr.PrintMessage(
            tree->locationOf(token), llvm::SourceMgr::DK_Error,
            "nesting deeper than " + llvm::Twine(kMaxNesting) +
                " levels is not supported");
        return tree;
      }
    } else if ((spelling == "}" || spelling == ")") && depth > 0) {
      --depth;
    }
  }

  // Two-stage parse: the fast SLL prediction bails out on the first
  // problem; only then is the input parsed again with full LL prediction
  // and error recovery, so that every syntax error is reported.
  tree->parser = std::make_unique<grammar::SpanParser>(tree->tokens.get());
  tree->parser->removeErrorListeners();
  tree->parser->getInterpreter<antlr4::atn::ParserATNSimulator>()
      ->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  tree->parser->setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  if (!tree->numSyntaxErrors()) {
    try {
      tree->moduleContext = tree->parser->module();
      return tree;
    } catch (const antlr4::ParseCancellationException &) {
      tree->moduleContext = nullptr;
    }
  }
  tree->tokens->seek(0);
  tree->parser->reset();
  tree->parser->addErrorListener(tree->errorListener.get());
  tree->parser->setErrorHandler(
      std::make_shared<antlr4::DefaultErrorStrategy>());
  tree->parser->getInterpreter<antlr4::atn::ParserATNSimulator>()
      ->setPredictionMode(antlr4::atn::PredictionMode::LL);
  tree->moduleContext = tree->parser->module();
  return tree;
}

SyntaxTree::~SyntaxTree() = default;

llvm::SMLoc SyntaxTree::locationOf(const antlr4::Token *token) const {
  size_t index = token->getStartIndex();
  const char *start = sourceMgr->getMemoryBuffer(bufferId)->getBufferStart();
  size_t size = sourceMgr->getMemoryBuffer(bufferId)->getBufferSize();
  size_t offset;
  if (codePointOffsets.empty())
    offset = index;
  else
    offset = index < codePointOffsets.size() ? codePointOffsets[index] : size;
  return llvm::SMLoc::getFromPointer(start + std::min(offset, size));
}

llvm::SMLoc SyntaxTree::locationOf(size_t line, size_t codePointColumn) const {
  const llvm::MemoryBuffer *buffer = sourceMgr->getMemoryBuffer(bufferId);
  const char *cursor = buffer->getBufferStart();
  const char *end = buffer->getBufferEnd();
  if (line >= 1 && line <= lineStarts.size())
    cursor += lineStarts[line - 1];
  else if (line > lineStarts.size())
    cursor = end;
  for (size_t column = 0; column < codePointColumn && cursor < end;) {
    ++cursor;
    if (cursor == end || (static_cast<unsigned char>(*cursor) & 0xC0) != 0x80)
      ++column;
  }
  return llvm::SMLoc::getFromPointer(cursor);
}

std::string SyntaxTree::toStringTree() const {
  return moduleContext ? moduleContext->toStringTree(parser.get()) : "";
}

} // namespace spanc::frontend
