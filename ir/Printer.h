//===- Printer.h - Print span IR in its textual form ----------------------===//
//
// The text form (docs/ARCHITECTURE.md, "The IR"): one op per line, `%N` results
// numbered in program order per query, attributes in `{}` sorted by name,
// strings in double quotes with escapes. Locations are printed as a trailing
// `loc("file":line:col)` only when asked, so the default text stays short.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_PRINTER_H
#define SPANC_IR_PRINTER_H

#include "ir/IR.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace spanc::ir {

struct PrintOptions {
  /// Append `loc("file":line:col)` to every op and query.
  bool printLocations = false;
};

void printModule(const Module &module, llvm::raw_ostream &os,
                 const PrintOptions &options = {});
void printQuery(const Query &query, llvm::raw_ostream &os,
                const PrintOptions &options = {});
std::string toString(const Module &module, const PrintOptions &options = {});

/// Prints one op alone (its operands as `%N` by their query position); for
/// diagnostics and debugging. Call Query::numberOps() first.
void printOp(const Op &op, llvm::raw_ostream &os,
             const PrintOptions &options = {});

/// Writes `text` as a double-quoted string with escapes for `"`, `\` and
/// control characters; other bytes (UTF-8) are written as they are.
void printQuotedString(llvm::StringRef text, llvm::raw_ostream &os);
/// Writes a float so that it parses back to the same double and always
/// reads as a float (`0.0`, not `0`).
void printFloat(double value, llvm::raw_ostream &os);
void printAttribute(const Attribute &attribute, llvm::raw_ostream &os);

} // namespace spanc::ir

#endif // SPANC_IR_PRINTER_H
