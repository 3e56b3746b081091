//===- SpanTokenSource.h - Hand-written lexer for Span.g4's tokens --------===//
//
// ANTLR's generated C++ lexer takes a lock and a hash lookup per character,
// which made lexing most of the front end's time on large programs. This
// token source produces the same tokens (types and texts) as the lexer
// rules of grammar/Span.g4; token types and keyword spellings come from the
// generated lexer's vocabulary, so the grammar stays the one definition of
// the token set. test/unit/frontend checks it against the generated lexer.
// Start and stop indices are byte offsets.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_SPANTOKENSOURCE_H
#define SPANC_FRONTEND_SPANTOKENSOURCE_H

#include "grammar/SpanLexer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>

namespace spanc::frontend {

/// The tokens of Span.g4's lexer rules over UTF-8 `text` (which must
/// outlive the source). `input` is what getInputStream() returns.
class SpanTokenSource : public antlr4::TokenSource {
public:
  SpanTokenSource(llvm::StringRef text, antlr4::CharStream *input,
                  const antlr4::dfa::Vocabulary &vocabulary)
      : text(text), input(input) {
    for (size_t type = 1; type <= vocabulary.getMaxTokenType(); ++type) {
      std::string literal = vocabulary.getLiteralName(type);
      if (literal.size() >= 3 && literal.front() == '\'')
        literals[llvm::StringRef(literal).drop_front().drop_back()] = type;
    }
    // A UTF-8 byte order mark is skipped, as ANTLR's input stream skips it
    // (frontend/Load.cpp leaves it out of the buffer before this).
    if (text.startswith("\xEF\xBB\xBF"))
      cursor = scanned = lineStart = tokenLineStart = 3;
  }

  std::unique_ptr<antlr4::Token> nextToken() override {
    skipSpaceAndComments();
    size_t start = cursor;
    if (cursor >= text.size())
      return make(antlr4::Token::EOF, start, "<EOF>");
    char c = text[cursor];
    if (isIdentifierStart(c)) {
      while (cursor < text.size() && isIdentifierChar(text[cursor]))
        ++cursor;
      llvm::StringRef word = text.slice(start, cursor);
      auto it = literals.find(word);
      return make(it != literals.end() ? it->second
                                       : size_t(grammar::SpanLexer::ID),
                  start, word);
    }
    if (c == '"')
      return lexString(start);
    if (llvm::isDigit(c) || c == '-' || c == '.')
      if (size_t type = lexNumber())
        return make(type, start, text.slice(start, cursor));
    if (literals.count(llvm::StringRef(&c, 1))) {
      ++cursor;
      return make(literals.lookup(llvm::StringRef(&c, 1)), start,
                  text.slice(start, cursor));
    }
    // Anything else is one UNEXPECTED_CHAR per code point, for the parser
    // to report where it stands.
    ++cursor;
    while (cursor < text.size() &&
           (static_cast<unsigned char>(text[cursor]) & 0xC0) == 0x80)
      ++cursor;
    return make(grammar::SpanLexer::UNEXPECTED_CHAR, start,
                text.slice(start, cursor));
  }

  size_t getLine() const override { return line; }
  size_t getCharPositionInLine() override { return cursor - lineStart; }
  antlr4::CharStream *getInputStream() override { return input; }
  std::string getSourceName() override { return input->getSourceName(); }
  antlr4::TokenFactory<antlr4::CommonToken> *getTokenFactory() override {
    return antlr4::CommonTokenFactory::DEFAULT.get();
  }

private:
  static bool isIdentifierStart(char c) { return llvm::isAlpha(c) || c == '_'; }
  static bool isIdentifierChar(char c) { return llvm::isAlnum(c) || c == '_'; }

  std::unique_ptr<antlr4::Token> make(size_t type, size_t start,
                                      llvm::StringRef spelling) {
    auto token = std::make_unique<antlr4::CommonToken>(
        std::make_pair(static_cast<antlr4::TokenSource *>(this), input), type,
        antlr4::Token::DEFAULT_CHANNEL, start,
        type == antlr4::Token::EOF ? start - 1 : cursor - 1);
    token->setText(spelling.str());
    token->setLine(tokenLine);
    token->setCharPositionInLine(start - tokenLineStart);
    advanceLines(start);
    return token;
  }

  /// Keeps line numbers for the tokens (ANTLR's messages use them).
  void advanceLines(size_t upTo) {
    for (; scanned < upTo; ++scanned)
      if (text[scanned] == '\n') {
        ++line;
        lineStart = scanned + 1;
      }
  }

  void skipSpaceAndComments() {
    while (cursor < text.size()) {
      char c = text[cursor];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++cursor;
      } else if (c == '#') {
        while (cursor < text.size() && text[cursor] != '\r' &&
               text[cursor] != '\n')
          ++cursor;
      } else {
        break;
      }
    }
    advanceLines(cursor);
    tokenLine = line;
    tokenLineStart = lineStart;
  }

  size_t digitsFrom(size_t at) const {
    size_t end = at;
    while (end < text.size() && llvm::isDigit(text[end]))
      ++end;
    return end;
  }

  /// [eE] [+-]? DIGIT+ at `at`: the end of it, or `at` if there is none.
  size_t exponentFrom(size_t at) const {
    if (at >= text.size() || (text[at] != 'e' && text[at] != 'E'))
      return at;
    size_t digits = at + 1;
    if (digits < text.size() && (text[digits] == '+' || text[digits] == '-'))
      ++digits;
    size_t end = digitsFrom(digits);
    return end > digits ? end : at;
  }

  /// INT or FLOAT (with an optional '-'), longest match; 0 if neither.
  size_t lexNumber() {
    size_t at = cursor;
    if (text[at] == '-')
      ++at;
    size_t integerEnd = digitsFrom(at);
    if (integerEnd > at) {
      if (integerEnd < text.size() && text[integerEnd] == '.') {
        cursor = exponentFrom(digitsFrom(integerEnd + 1));
        return grammar::SpanLexer::FLOAT;
      }
      size_t exponentEnd = exponentFrom(integerEnd);
      cursor = exponentEnd;
      return exponentEnd > integerEnd ? grammar::SpanLexer::FLOAT
                                      : grammar::SpanLexer::INT;
    }
    if (at < text.size() && text[at] == '.') {
      size_t fractionEnd = digitsFrom(at + 1);
      if (fractionEnd > at + 1) {
        cursor = exponentFrom(fractionEnd);
        return grammar::SpanLexer::FLOAT;
      }
    }
    return 0;
  }

  std::unique_ptr<antlr4::Token> lexString(size_t start) {
    // """...""": up to the first closing """.
    if (text.substr(start, 3) == "\"\"\"") {
      size_t close = text.find("\"\"\"", start + 3);
      if (close != llvm::StringRef::npos) {
        cursor = close + 3;
        return make(grammar::SpanLexer::STRING, start,
                    text.slice(start, cursor));
      }
    }
    // "..." with escapes, on one line.
    size_t at = start + 1;
    while (at < text.size()) {
      char c = text[at];
      if (c == '"') {
        cursor = at + 1;
        return make(grammar::SpanLexer::STRING, start,
                    text.slice(start, cursor));
      }
      if (c == '\r' || c == '\n')
        break;
      if (c == '\\') {
        size_t escape = validEscapeLength(at);
        if (!escape)
          break;
        at += escape;
        continue;
      }
      ++at;
    }
    // Not a string: the quote alone is an unexpected character.
    cursor = start + 1;
    return make(grammar::SpanLexer::UNEXPECTED_CHAR, start,
                text.slice(start, cursor));
  }

  size_t validEscapeLength(size_t at) const {
    if (at + 1 >= text.size())
      return 0;
    char c = text[at + 1];
    if (llvm::StringRef("\"\\/nrt0").contains(c))
      return 2;
    if (c == 'u' && at + 6 <= text.size() &&
        llvm::all_of(text.substr(at + 2, 4), llvm::isHexDigit))
      return 6;
    return 0;
  }

  llvm::StringRef text;
  antlr4::CharStream *input;
  llvm::StringMap<size_t> literals;
  size_t cursor = 0;
  size_t scanned = 0;
  size_t line = 1, lineStart = 0;
  size_t tokenLine = 1, tokenLineStart = 0;
};

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_SPANTOKENSOURCE_H
