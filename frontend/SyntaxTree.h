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

  grammar::SpanParser::ModuleContext *module() const { return moduleContext; }
  unsigned numSyntaxErrors() const { return syntaxErrors; }

  /// The SourceMgr location of a token (ANTLR columns count code points).
  llvm::SMLoc locationOf(const antlr4::Token *token) const;

  /// Prints the tree in LISP form, for `spanc compile --emit=ast`.
  std::string toStringTree() const;

private:
  SyntaxTree() = default;

  llvm::SourceMgr *sourceMgr = nullptr;
  unsigned bufferId = 0;
  std::unique_ptr<antlr4::ANTLRInputStream> input;
  std::unique_ptr<grammar::SpanLexer> lexer;
  std::unique_ptr<antlr4::CommonTokenStream> tokens;
  std::unique_ptr<grammar::SpanParser> parser;
  std::unique_ptr<antlr4::ANTLRErrorListener> errorListener;
  grammar::SpanParser::ModuleContext *moduleContext = nullptr;
  unsigned syntaxErrors = 0;

  friend class SyntaxErrorListener;
};

/// Converts a 1-based line and a 0-based column in code points to a
/// location in `bufferId`.
llvm::SMLoc locationFor(const llvm::SourceMgr &sourceMgr, unsigned bufferId,
                        size_t line, size_t codePointColumn);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_SYNTAXTREE_H
