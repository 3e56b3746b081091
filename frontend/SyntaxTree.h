//===- SyntaxTree.h - Parse .span source into ANTLR's parse tree ----------===//
//
// The ANTLR objects stop here: syntax errors become llvm::SourceMgr
// diagnostics (file:line:col, the line, a caret) and the caller gets a
// parse tree that it walks with the generated visitor.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_SYNTAXTREE_H
#define SPANC_FRONTEND_SYNTAXTREE_H

#include "grammar/SpanLexer.h"
#include "grammar/SpanParser.h"

#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <vector>

namespace spanc::frontend {

/// Owns everything ANTLR needs to keep a parse tree alive.
class SyntaxTree {
public:
  /// Parses buffer `bufferId` of `sourceMgr`. Syntax errors are printed
  /// through `sourceMgr` and counted; the tree is returned in any case so
  /// that callers may go on to report semantic errors of the good parts.
  static std::unique_ptr<SyntaxTree> parse(llvm::SourceMgr &sourceMgr,
                                           unsigned bufferId);
  ~SyntaxTree();

  /// The parse tree; null when the input was rejected before parsing
  /// (invalid UTF-8, nesting too deep), which counts as a syntax error.
  grammar::SpanParser::ModuleContext *module() const { return moduleContext; }
  unsigned numSyntaxErrors() const { return syntaxErrors; }

  /// The SourceMgr location of a token.
  llvm::SMLoc locationOf(const antlr4::Token *token) const;
  /// The location of a 1-based line and a 0-based code-point column.
  llvm::SMLoc locationOf(size_t line, size_t codePointColumn) const;
  unsigned getBufferId() const { return bufferId; }

  /// Blocks and parentheses nested deeper than this are rejected with a
  /// located error: the parser and the lowering recurse on nesting.
  static constexpr unsigned kMaxNesting = 256;

  /// Prints the tree in LISP form, for `spanc compile --emit=ast`.
  std::string toStringTree() const;

private:
  SyntaxTree() = default;

  llvm::SourceMgr *sourceMgr = nullptr;
  unsigned bufferId = 0;
  std::unique_ptr<antlr4::ANTLRInputStream> input;
  std::unique_ptr<grammar::SpanLexer> lexer;
  std::unique_ptr<antlr4::TokenSource> tokenSource;
  std::unique_ptr<antlr4::CommonTokenStream> tokens;
  std::unique_ptr<grammar::SpanParser> parser;
  std::unique_ptr<antlr4::ANTLRErrorListener> errorListener;
  grammar::SpanParser::ModuleContext *moduleContext = nullptr;
  unsigned syntaxErrors = 0;
  /// Byte offset of each line start (index 0 is line 1).
  std::vector<size_t> lineStarts;

  friend class SyntaxErrorListener;
};

/// Converts a 1-based line and a 0-based column in code points to a
/// location in `bufferId`.
llvm::SMLoc locationFor(const llvm::SourceMgr &sourceMgr, unsigned bufferId,
                        size_t line, size_t codePointColumn);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_SYNTAXTREE_H
