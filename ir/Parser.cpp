//===- Parser.cpp - Parse the textual form of span IR ---------------------===//

#include "ir/Parser.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

namespace spanc::ir {

namespace {
/// The value of the four hex digits after the `u` at `at`, if they are.
std::optional<unsigned> hexEscape(llvm::StringRef body, size_t at) {
  unsigned codePoint = 0;
  llvm::StringRef digits = body.substr(at + 1, 4);
  if (digits.size() != 4 || !llvm::all_of(digits, llvm::isHexDigit) ||
      digits.getAsInteger(16, codePoint))
    return std::nullopt;
  return codePoint;
}
} // namespace

bool unescapeString(llvm::StringRef body, std::string &result,
                    size_t &errorOffset, std::string *problem) {
  result.clear();
  result.reserve(body.size());
  auto fail = [&](size_t offset, const std::string &what) {
    errorOffset = offset;
    if (problem)
      *problem = what;
    return false;
  };
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\') {
      result.push_back(c);
      continue;
    }
    if (i + 1 >= body.size())
      return fail(i, "invalid escape sequence in string");
    char escape = body[++i];
    switch (escape) {
    case '"':
    case '\\':
    case '/':
      result.push_back(escape);
      break;
    case 'n':
      result.push_back('\n');
      break;
    case 'r':
      result.push_back('\r');
      break;
    case 't':
      result.push_back('\t');
      break;
    case '0':
      result.push_back('\0');
      break;
    case 'u': {
      std::optional<unsigned> codePoint = hexEscape(body, i);
      if (!codePoint)
        return fail(i - 1, "invalid escape sequence in string: \\u takes "
                           "four hex digits");
      i += 4;
      // As in JSON, a character past U+FFFF is a UTF-16 surrogate pair
      // ("\uD83D\uDE00" is U+1F600); a half alone is no character, and an
      // error.
      const std::string spelled = body.substr(i - 5, 6).str();
      if (*codePoint >= 0xDC00 && *codePoint <= 0xDFFF)
        return fail(i - 5, "invalid escape sequence in string: '" + spelled +
                               "' is a lone low surrogate (a character past "
                               "U+FFFF is a pair, as \\uD83D\\uDE00)");
      if (*codePoint >= 0xD800 && *codePoint <= 0xDBFF) {
        std::optional<unsigned> low;
        if (i + 2 < body.size() && body[i + 1] == '\\' && body[i + 2] == 'u')
          low = hexEscape(body, i + 2);
        if (!low || *low < 0xDC00 || *low > 0xDFFF)
          return fail(i - 5, "invalid escape sequence in string: '" + spelled +
                                 "' is a high surrogate without the low one "
                                 "that must follow it (\\uDC00-\\uDFFF)");
        *codePoint = 0x10000 + ((*codePoint - 0xD800) << 10) + (*low - 0xDC00);
        i += 6;
      }
      char utf8[UNI_MAX_UTF8_BYTES_PER_CODE_POINT];
      char *end = utf8;
      llvm::ConvertCodePointToUTF8(*codePoint, end);
      result.append(utf8, end);
      break;
    }
    default:
      return fail(i - 1, "invalid escape sequence in string");
    }
  }
  return true;
}

namespace {

enum class TokenKind {
  Eof,
  Error,
  Identifier, // letters, digits, '_', '.', '-' (span.gen, max_tokens)
  ValueName,  // %name
  QueryName,  // @name (or @"...")
  String,
  Integer,
  Float,
  Equal,
  Comma,
  Colon,
  LeftBrace,
  RightBrace,
  LeftParen,
  RightParen,
};

struct Token {
  TokenKind kind = TokenKind::Eof;
  llvm::StringRef spelling;
  /// The first token on its line (ops are one per line).
  bool atLineStart = false;
};

class Lexer {
public:
  explicit Lexer(llvm::StringRef text) : text(text), cursor(text.begin()) {}

  Token next() {
    bool newline = cursor == text.begin();
    for (;;) {
      if (cursor == text.end())
        return {TokenKind::Eof, llvm::StringRef(cursor, 0), true};
      char c = *cursor;
      if (c == '\n') {
        newline = true;
        ++cursor;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++cursor;
      } else if (c == '/' && cursor + 1 != text.end() && cursor[1] == '/') {
        while (cursor != text.end() && *cursor != '\n')
          ++cursor;
      } else {
        break;
      }
    }
    const char *start = cursor;
    auto make = [&](TokenKind kind) {
      return Token{kind, llvm::StringRef(start, cursor - start), newline};
    };
    char c = *cursor++;
    switch (c) {
    case '=':
      return make(TokenKind::Equal);
    case ',':
      return make(TokenKind::Comma);
    case ':':
      return make(TokenKind::Colon);
    case '{':
      return make(TokenKind::LeftBrace);
    case '}':
      return make(TokenKind::RightBrace);
    case '(':
      return make(TokenKind::LeftParen);
    case ')':
      return make(TokenKind::RightParen);
    case '"':
      return lexString(start, newline);
    case '%':
    case '@': {
      if (c == '@' && cursor != text.end() && *cursor == '"') {
        ++cursor;
        Token string = lexString(start + 1, newline);
        if (string.kind == TokenKind::Error)
          return string;
        return {TokenKind::QueryName, llvm::StringRef(start, cursor - start),
                newline};
      }
      while (cursor != text.end() && isNameChar(*cursor))
        ++cursor;
      if (cursor == start + 1)
        return make(TokenKind::Error);
      return make(c == '%' ? TokenKind::ValueName : TokenKind::QueryName);
    }
    default:
      break;
    }
    if (llvm::isDigit(c) || c == '-' || c == '+') {
      bool isFloat = false;
      while (cursor != text.end()) {
        char d = *cursor;
        if (llvm::isDigit(d)) {
          ++cursor;
        } else if (d == '.' || d == 'e' || d == 'E') {
          isFloat = true;
          ++cursor;
          if ((d == 'e' || d == 'E') && cursor != text.end() &&
              (*cursor == '-' || *cursor == '+'))
            ++cursor;
        } else {
          break;
        }
      }
      return make(isFloat ? TokenKind::Float : TokenKind::Integer);
    }
    if (llvm::isAlpha(c) || c == '_') {
      while (cursor != text.end() && isNameChar(*cursor))
        ++cursor;
      return make(TokenKind::Identifier);
    }
    return make(TokenKind::Error);
  }

private:
  static bool isNameChar(char c) {
    return llvm::isAlnum(c) || c == '_' || c == '.' || c == '-' || c == '$';
  }

  Token lexString(const char *start, bool newline) {
    while (cursor != text.end()) {
      char c = *cursor;
      if (c == '"') {
        ++cursor;
        return {TokenKind::String, llvm::StringRef(start, cursor - start),
                newline};
      }
      if (c == '\n')
        break;
      if (c == '\\' && cursor + 1 != text.end() && cursor[1] != '\n')
        ++cursor;
      ++cursor;
    }
    return {TokenKind::Error, llvm::StringRef(start, cursor - start), newline};
  }

  llvm::StringRef text;
  const char *cursor;
};

class Parser {
public:
  Parser(unsigned bufferId, DiagnosticEngine &diagnostics)
      : diagnostics(diagnostics),
        lexer(
            diagnostics.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()) {
    advance();
  }

  std::unique_ptr<Module> parseModule() {
    auto module = std::make_unique<Module>();
    while (token.kind != TokenKind::Eof) {
      if (!parseQuery(*module))
        return nullptr;
    }
    return module;
  }

private:
  struct PendingUse {
    Op *user;
    unsigned index;
    llvm::StringRef name;
    llvm::SMLoc loc;
  };

  void advance() { token = lexer.next(); }
  llvm::SMLoc here() const {
    return llvm::SMLoc::getFromPointer(token.spelling.data());
  }

  bool error(llvm::SMLoc loc, const llvm::Twine &message) {
    diagnostics.emit(loc, llvm::SourceMgr::DK_Error, message);
    return false;
  }
  bool error(const llvm::Twine &message) {
    if (token.kind == TokenKind::Error && token.spelling.startswith("\""))
      return error(here(), "unterminated string");
    if (token.kind == TokenKind::Error)
      return error(here(), "unexpected character '" +
                               token.spelling.take_front(1) + "'");
    return error(here(), message);
  }
  llvm::StringRef describe() const {
    return token.kind == TokenKind::Eof ? llvm::StringRef("end of file")
                                        : token.spelling;
  }

  bool expect(TokenKind kind, const char *what) {
    if (token.kind != kind)
      return error(llvm::Twine("expected ") + what + ", found '" + describe() +
                   "'");
    advance();
    return true;
  }

  bool parseString(std::string &result) {
    if (token.kind != TokenKind::String)
      return error(llvm::Twine("expected a string, found '") + describe() +
                   "'");
    llvm::StringRef body = token.spelling.drop_front().drop_back();
    size_t errorOffset = 0;
    std::string problem;
    if (!unescapeString(body, result, errorOffset, &problem))
      return error(llvm::SMLoc::getFromPointer(body.data() + errorOffset),
                   problem);
    advance();
    return true;
  }

  /// `loc("file":line:col)`, if present.
  bool parseOptionalLocation(Location &loc) {
    if (token.kind != TokenKind::Identifier || token.spelling != "loc")
      return true;
    advance();
    std::string file;
    unsigned line = 0, column = 0;
    if (!expect(TokenKind::LeftParen, "'('") || !parseString(file) ||
        !expect(TokenKind::Colon, "':'") || !parseUnsigned(line) ||
        !expect(TokenKind::Colon, "':'") || !parseUnsigned(column) ||
        !expect(TokenKind::RightParen, "')'"))
      return false;
    loc = {internFileName(file), line, column};
    return true;
  }

  bool parseUnsigned(unsigned &value) {
    if (token.kind != TokenKind::Integer ||
        token.spelling.getAsInteger(10, value))
      return error(llvm::Twine("expected a line or column number, found '") +
                   describe() + "'");
    advance();
    return true;
  }

  bool parseAttributeValue(llvm::SmallVectorImpl<NamedAttribute> &attrs,
                           std::string name) {
    switch (token.kind) {
    case TokenKind::String: {
      std::string value;
      if (!parseString(value))
        return false;
      attrs.push_back({std::move(name), Attribute(std::move(value))});
      return true;
    }
    case TokenKind::Integer: {
      int64_t value = 0;
      llvm::StringRef digits = token.spelling;
      // getAsInteger does not take a leading '+'.
      if (digits.startswith("+"))
        digits = digits.drop_front();
      if (digits.getAsInteger(10, value))
        return error("integer out of range or malformed: '" + token.spelling +
                     "'");
      attrs.push_back({std::move(name), Attribute(value)});
      advance();
      return true;
    }
    case TokenKind::Float: {
      std::string spelling = token.spelling.str();
      char *end = nullptr;
      errno = 0;
      double value = std::strtod(spelling.c_str(), &end);
      if (end != spelling.c_str() + spelling.size() || errno == ERANGE)
        return error("malformed or out-of-range float: '" + token.spelling +
                     "'");
      attrs.push_back({std::move(name), Attribute(value)});
      advance();
      return true;
    }
    default:
      return error(llvm::Twine("expected an attribute value (string, "
                               "integer or float), found '") +
                   describe() + "'");
    }
  }

  bool parseAttributes(Op *op) {
    advance(); // '{'
    llvm::SmallVector<NamedAttribute, 4> attrs;
    if (token.kind != TokenKind::RightBrace) {
      for (;;) {
        if (token.kind != TokenKind::Identifier)
          return error(llvm::Twine("expected an attribute name, found '") +
                       describe() + "'");
        std::string name = token.spelling.str();
        llvm::SMLoc nameLoc = here();
        advance();
        for (const NamedAttribute &attr : attrs)
          if (attr.name == name)
            return error(nameLoc, "duplicate attribute '" + name + "'");
        if (!expect(TokenKind::Equal, "'='") ||
            !parseAttributeValue(attrs, std::move(name)))
          return false;
        if (token.kind != TokenKind::Comma)
          break;
        advance();
      }
    }
    if (token.kind != TokenKind::RightBrace)
      return error(llvm::Twine("expected ',' or '}' in the attributes, "
                               "found '") +
                   describe() + "'");
    advance();
    op->setAttributes(attrs);
    return true;
  }

  bool parseOp(Query &query, llvm::StringMap<Op *> &values,
               llvm::SmallVectorImpl<PendingUse> &pending) {
    llvm::SMLoc opLoc = here();
    llvm::StringRef resultName;
    if (token.kind == TokenKind::ValueName) {
      resultName = token.spelling;
      advance();
      if (!expect(TokenKind::Equal, "'=' after the result name"))
        return false;
    }
    if (token.kind != TokenKind::Identifier ||
        !token.spelling.startswith("span."))
      return error(llvm::Twine("expected an op (span.NAME), found '") +
                   describe() + "'");
    llvm::StringRef opName = token.spelling.drop_front(5);
    std::optional<OpKind> kind = lookupOpKind(opName);
    if (!kind)
      return error("unknown op 'span." + opName + "'");
    if (*kind == OpKind::Yield && !resultName.empty())
      return error(opLoc, "'span.yield' has no result");
    if (*kind != OpKind::Yield && resultName.empty())
      return error(opLoc, "'span." + opName +
                              "' needs a result name: %N = span." + opName);
    const OpInfo &info = getOpInfo(*kind);
    advance();

    Op *op = query.createOp(*kind, diagnostics.getLocation(opLoc), {});
    if (info.text == TextPosition::Leading) {
      std::string text;
      if (!parseString(text))
        return false;
      op->setText(std::move(text));
    }
    // Operands: %a, %b, ... on the op's own line.
    if (token.kind == TokenKind::ValueName && !token.atLineStart) {
      for (;;) {
        if (token.kind != TokenKind::ValueName)
          return error(llvm::Twine("expected an operand (%name), found '") +
                       describe() + "'");
        auto it = values.find(token.spelling);
        if (it != values.end()) {
          op->appendOperand(it->second);
        } else {
          // Resolved at the end of the query; the verifier then reports
          // a use before the definition at this op's location.
          pending.push_back({op, op->getNumOperands(), token.spelling, here()});
          op->appendOperand(nullptr);
        }
        advance();
        if (token.kind != TokenKind::Comma)
          break;
        advance();
      }
    }
    if (token.kind == TokenKind::LeftBrace && !token.atLineStart &&
        !parseAttributes(op))
      return false;
    if (info.text == TextPosition::Query) {
      if (token.kind != TokenKind::Identifier || token.spelling != "query" ||
          token.atLineStart)
        return error(llvm::Twine("expected 'query \"...\"' after "
                                 "'span.retrieve', found '") +
                     describe() + "'");
      advance();
      std::string text;
      if (!parseString(text))
        return false;
      op->setText(std::move(text));
    }
    if (!token.atLineStart) {
      Location loc;
      if (!parseOptionalLocation(loc))
        return false;
      if (loc.isKnown())
        op->setLoc(loc);
    }
    if (!token.atLineStart && token.kind != TokenKind::RightBrace)
      return error(llvm::Twine("expected the end of the line after 'span.") +
                   opName + "', found '" + describe() + "'");
    if (!resultName.empty() && !values.try_emplace(resultName, op).second)
      return error(opLoc, "redefinition of value '" + resultName + "'");
    return true;
  }

  bool parseQuery(Module &module) {
    llvm::SMLoc queryLoc = here();
    if (token.kind != TokenKind::Identifier || token.spelling != "span.query")
      return error(llvm::Twine("expected 'span.query', found '") + describe() +
                   "'");
    advance();
    if (token.kind != TokenKind::QueryName)
      return error(llvm::Twine("expected a query name (@name), found '") +
                   describe() + "'");
    std::string name;
    llvm::StringRef spelling = token.spelling.drop_front();
    if (spelling.startswith("\"")) {
      size_t errorOffset = 0;
      if (!unescapeString(spelling.drop_front().drop_back(), name, errorOffset))
        return error("invalid escape sequence in query name");
    } else {
      name = spelling.str();
    }
    if (module.lookupQuery(name))
      return error("redefinition of query '@" + name + "'");
    advance();
    Location loc = diagnostics.getLocation(queryLoc);
    if (!parseOptionalLocation(loc))
      return false;
    if (!expect(TokenKind::LeftBrace, "'{'"))
      return false;
    Query *query = module.addQuery(std::move(name), loc);
    llvm::StringMap<Op *> values;
    llvm::SmallVector<PendingUse, 4> pending;
    while (token.kind != TokenKind::RightBrace) {
      if (token.kind == TokenKind::Eof)
        return error("expected '}' to close query '@" + query->getName() + "'");
      if (!token.atLineStart)
        return error(llvm::Twine("expected a new line before '") + describe() +
                     "'");
      if (!parseOp(*query, values, pending))
        return false;
    }
    advance();
    for (const PendingUse &use : pending) {
      auto it = values.find(use.name);
      if (it == values.end())
        return error(use.loc, "use of undefined value '" + use.name + "'");
      use.user->setOperand(use.index, it->second);
    }
    return true;
  }

  DiagnosticEngine &diagnostics;
  Lexer lexer;
  Token token;
};

} // namespace

std::unique_ptr<Module> parseModule(unsigned bufferId,
                                    DiagnosticEngine &diagnostics) {
  llvm::StringRef name = diagnostics.getSourceMgr()
                             .getMemoryBuffer(bufferId)
                             ->getBufferIdentifier();
  diagnostics.registerBuffer(name, bufferId);
  Parser parser(bufferId, diagnostics);
  return parser.parseModule();
}

std::unique_ptr<Module> parseModuleString(llvm::StringRef text,
                                          llvm::StringRef name,
                                          DiagnosticEngine &diagnostics) {
  unsigned bufferId = diagnostics.getSourceMgr().AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, name), llvm::SMLoc());
  return parseModule(bufferId, diagnostics);
}

} // namespace spanc::ir
