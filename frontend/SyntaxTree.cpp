//===- SyntaxTree.cpp - Parse .span source into ANTLR's parse tree --------===//

#include "frontend/SyntaxTree.h"

#include "frontend/SpanTokenSource.h"

#include "grammar/SpanLexer.h"
#include "ir/Diagnostics.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
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
    // Recovery can find an error per token; each message scans its line.
    if (tree.syntaxErrors > ir::kMaxPrintedErrors + 1)
      return;
    llvm::SMLoc loc = offendingSymbol ? tree.locationOf(offendingSymbol)
                                      : tree.locationOf(line, column);
    if (tree.syntaxErrors == ir::kMaxPrintedErrors + 1)
      return ir::printMessage(*tree.sourceMgr, loc, llvm::SourceMgr::DK_Note,
                              ir::kTooManyErrors);
    ir::printMessage(*tree.sourceMgr, loc, llvm::SourceMgr::DK_Error, message);
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
    // Programs are UTF-8 text; say where they are not.
    const auto *start = reinterpret_cast<const llvm::UTF8 *>(text.data());
    const llvm::UTF8 *cursor = start;
    const auto *end = start + text.size();
    if (!llvm::isLegalUTF8String(&cursor, end)) {
      ++tree->syntaxErrors;
      ir::printMessage(
          sourceMgr,
          llvm::SMLoc::getFromPointer(text.data() + (cursor - start)),
          llvm::SourceMgr::DK_Error, "invalid UTF-8 in source");
      return tree;
    }
  }

  // The tokens carry their text, so the character stream ANTLR asks for
  // stays empty (no UTF-32 copy of the program). The generated lexer only
  // lends its vocabulary to the hand-written token source.
  tree->input = std::make_unique<antlr4::ANTLRInputStream>("");
  tree->input->name =
      sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier().str();
  tree->lexer = std::make_unique<grammar::SpanLexer>(tree->input.get());
  tree->tokenSource = std::make_unique<SpanTokenSource>(
      text, tree->input.get(), tree->lexer->getVocabulary());
  tree->tokens =
      std::make_unique<antlr4::CommonTokenStream>(tree->tokenSource.get());
  tree->errorListener = std::make_unique<SyntaxErrorListener>(*tree);
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
        ir::printMessage(sourceMgr, tree->locationOf(token),
                         llvm::SourceMgr::DK_Error,
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
  // Token indices are byte offsets (SpanTokenSource).
  const llvm::MemoryBuffer *buffer = sourceMgr->getMemoryBuffer(bufferId);
  size_t offset = std::min(token->getStartIndex(), buffer->getBufferSize());
  return llvm::SMLoc::getFromPointer(buffer->getBufferStart() + offset);
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
