//===- Printer.cpp - Print span IR in its textual form --------------------===//

#include "ir/Printer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace spanc::ir {

void printQuotedString(llvm::StringRef text, llvm::raw_ostream &os) {
  os << '"';
  for (unsigned char c : text) {
    switch (c) {
    case '"':
      os << "\\\"";
      break;
    case '\\':
      os << "\\\\";
      break;
    case '\n':
      os << "\\n";
      break;
    case '\t':
      os << "\\t";
      break;
    case '\r':
      os << "\\r";
      break;
    default:
      if (c < 0x20 || c == 0x7f)
        os << "\\u00" << llvm::hexdigit(c >> 4, true)
           << llvm::hexdigit(c & 15, true);
      else
        os << c;
    }
  }
  os << '"';
}

void printFloat(double value, llvm::raw_ostream &os) {
  if (std::isnan(value)) {
    os << "nan";
    return;
  }
  if (std::isinf(value)) {
    os << (value < 0 ? "-inf" : "inf");
    return;
  }
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  llvm::StringRef text(buffer);
  os << text;
  if (text.find_first_of(".e") == llvm::StringRef::npos)
    os << ".0";
}

void printAttribute(const Attribute &attribute, llvm::raw_ostream &os) {
  switch (attribute.kind()) {
  case Attribute::Kind::Int:
    os << attribute.getInt();
    break;
  case Attribute::Kind::Float:
    printFloat(attribute.getFloat(), os);
    break;
  case Attribute::Kind::String:
    printQuotedString(attribute.getString(), os);
    break;
  }
}

static bool isIdentifier(llvm::StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_'))
    return false;
  return llvm::all_of(name.drop_front(), [](char c) {
    return llvm::isAlnum(c) || c == '_' || c == '-' || c == '.';
  });
}

static void printLocation(Location loc, llvm::raw_ostream &os) {
  os << " loc(";
  printQuotedString(loc.file, os);
  os << ':' << loc.line << ':' << loc.column << ')';
}

void printOp(const Op &op, llvm::raw_ostream &os, const PrintOptions &options) {
  const OpInfo &info = op.getInfo();
  if (op.hasResult())
    os << '%' << op.scratch << " = ";
  os << "span." << info.name;
  if (info.text == TextPosition::Leading) {
    os << ' ';
    printQuotedString(op.getText(), os);
  }
  bool first = true;
  for (const Op *operand : op.operandValues()) {
    os << (first ? " " : ", ");
    first = false;
    // A dangling operand (its op was erased) prints as %<null> so that the
    // text shows the problem instead of crashing the printer.
    if (operand)
      os << '%' << operand->scratch;
    else
      os << "%<null>";
  }
  if (!op.getAttributes().empty()) {
    os << " {";
    first = true;
    for (const NamedAttribute &attr : op.getAttributes()) {
      os << (first ? "" : ", ") << attr.name << " = ";
      first = false;
      printAttribute(attr.value, os);
    }
    os << '}';
  }
  if (info.text == TextPosition::Query) {
    os << " query ";
    printQuotedString(op.getText(), os);
  }
  if (options.printLocations)
    printLocation(op.getLoc(), os);
}

void printQuery(const Query &query, llvm::raw_ostream &os,
                const PrintOptions &options) {
  query.numberOps();
  os << "span.query @";
  if (isIdentifier(query.getName()))
    os << query.getName();
  else
    printQuotedString(query.getName(), os);
  if (options.printLocations)
    printLocation(query.getLoc(), os);
  os << " {\n";
  for (const Op &op : query.getOps()) {
    os << "  ";
    printOp(op, os, options);
    os << '\n';
  }
  os << "}\n";
}

void printModule(const Module &module, llvm::raw_ostream &os,
                 const PrintOptions &options) {
  bool first = true;
  for (const auto &query : module.getQueries()) {
    if (!first)
      os << '\n';
    first = false;
    printQuery(*query, os, options);
  }
}

std::string toString(const Module &module, const PrintOptions &options) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os, options);
  os.flush();
  return text;
}

} // namespace spanc::ir
