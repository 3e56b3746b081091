//===- Parser.h - Parse the textual form of span IR -----------------------===//
//
// Reads what ir/Printer.h writes (and hand-written IR for tests): one op per
// line, `%name` values (forward references are resolved at the end of the
// query, so the verifier can report use-before-def with its location), `//`
// comments, optional `loc("file":line:col)`. An op without `loc(...)` is
// located where it stands in the .ir text. Syntax errors are reported
// through the DiagnosticEngine as file:line:col with the line and a caret;
// semantic checks (arity, attributes) are the verifier's.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_PARSER_H
#define SPANC_IR_PARSER_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include <memory>

namespace spanc::ir {

/// Parses buffer `bufferId` of the engine's SourceMgr. Returns null after
/// reporting the first syntax error.
std::unique_ptr<Module> parseModule(unsigned bufferId,
                                    DiagnosticEngine &diagnostics);

/// Adds `text` to the engine's SourceMgr as buffer `name` and parses it.
std::unique_ptr<Module> parseModuleString(llvm::StringRef text,
                                          llvm::StringRef name,
                                          DiagnosticEngine &diagnostics);

/// Decodes the escapes of a double-quoted string body (without the quotes):
/// \" \\ \/ \n \r \t \0 \uXXXX, a character past U+FFFF as a surrogate
/// pair (\uD83D\uDE00) as in JSON. Returns false and sets `errorOffset` to
/// the bad escape's offset in `body`, and `problem` (when given) to what is
/// wrong, if one is malformed (a lone surrogate included).
bool unescapeString(llvm::StringRef body, std::string &result,
                    size_t &errorOffset, std::string *problem = nullptr);

} // namespace spanc::ir

#endif // SPANC_IR_PARSER_H
