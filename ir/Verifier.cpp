//===- Verifier.cpp - Check that span IR is well formed -------------------===//

#include "ir/Verifier.h"

#include "ir/Printer.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace spanc::ir {

namespace {

std::string formatBound(double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (std::fabs(value) < 1e15 && value == std::floor(value))
    os << static_cast<int64_t>(value);
  else
    os << llvm::format("%g", value);
  return os.str();
}

const char *describeType(AttrType type) {
  switch (type) {
  case AttrType::Int:
    return "an integer";
  case AttrType::Float:
    return "a number";
  case AttrType::String:
    return "a string";
  }
  return "?";
}

std::string listAttributes(const OpInfo &info) {
  if (info.attributes.empty())
    return "it takes none";
  std::string text = "expected one of";
  for (const AttrSpec &spec : info.attributes)
    text +=
        std::string(&spec == info.attributes.begin() ? " " : ", ") + spec.name;
  return text;
}

class Verifier {
public:
  explicit Verifier(DiagnosticEngine &diagnostics) : diagnostics(diagnostics) {}

  void verifyQuery(const Query &query) {
    if (query.getName().empty())
      error(query.getLoc(), "a query needs a name");
    query.numberOps();
    const Op *yield = nullptr;
    for (const Op &op : query.getOps()) {
      verifyOp(op, query);
      if (op.getKind() != OpKind::Yield)
        continue;
      if (yield)
        error(op.getLoc(),
              "query '@" + query.getName() + "' has more than one span.yield");
      yield = &op;
    }
    if (!yield)
      error(query.getLoc(),
            "query '@" + query.getName() + "' has no span.yield");
    else if (yield != &query.getOps().back())
      error(yield->getLoc(), "span.yield must be the last op of query '@" +
                                 query.getName() + "'");
  }

  bool verifyModule(const Module &module) {
    llvm::StringSet<> names;
    for (const auto &query : module.getQueries()) {
      if (!names.insert(query->getName()).second)
        error(query->getLoc(),
              "redefinition of query '@" + query->getName() + "'");
      verifyQuery(*query);
    }
    return numErrors == 0;
  }

  unsigned numErrors = 0;

private:
  void error(Location loc, const llvm::Twine &message) {
    ++numErrors;
    diagnostics.error(loc, message);
  }

  void verifyOp(const Op &op, const Query &query) {
    const OpInfo &info = op.getInfo();
    std::string opName = std::string("'span.") + info.name + "'";
    unsigned numOperands = op.getNumOperands();
    if (info.maxOperands == OpInfo::kVariadic) {
      if (numOperands < info.minOperands)
        error(op.getLoc(), opName + " takes at least " +
                               llvm::Twine(info.minOperands) +
                               " operands, got " + llvm::Twine(numOperands));
    } else if (numOperands < info.minOperands ||
               numOperands > info.maxOperands) {
      error(op.getLoc(),
            opName + " takes " + llvm::Twine(info.minOperands) +
                (info.minOperands == 1 ? " operand" : " operands") + ", got " +
                llvm::Twine(numOperands));
    }
    for (unsigned i = 0; i < numOperands; ++i) {
      const Op *operand = op.getOperand(i);
      std::string which = opName + " operand #" + std::to_string(i);
      if (!operand) {
        error(op.getLoc(), which + " refers to an op that was erased");
        continue;
      }
      if (operand->getParent() != &query) {
        error(op.getLoc(),
              which + " is defined outside query '@" + query.getName() + "'");
        continue;
      }
      if (!operand->hasResult()) {
        error(op.getLoc(), which + " is a span.yield, which has no result");
        continue;
      }
      if (operand->scratch >= op.scratch)
        error(op.getLoc(), which + " (%" + llvm::Twine(operand->scratch) +
                               ") is used before it is defined");
    }

    bool wantsText = info.text != TextPosition::None;
    if (!wantsText && !op.getText().empty())
      error(op.getLoc(), opName + " has no text, but text is set");
    if (info.text == TextPosition::Query && op.getText().empty())
      error(op.getLoc(), opName + " needs a non-empty query text");

    for (const NamedAttribute &attr : op.getAttributes()) {
      const AttrSpec *spec = info.findAttribute(attr.name);
      if (!spec) {
        error(op.getLoc(), "unknown attribute '" + attr.name + "' on " +
                               opName + "; " + listAttributes(info));
        continue;
      }
      verifyAttribute(op, opName, *spec, attr.value);
    }
    for (const AttrSpec &spec : info.attributes)
      if (spec.required && !op.hasAttr(spec.name))
        error(op.getLoc(), opName + " needs attribute '" + spec.name + "'");
  }

  void verifyAttribute(const Op &op, const std::string &opName,
                       const AttrSpec &spec, const Attribute &value) {
    std::string what =
        ("attribute '" + llvm::Twine(spec.name) + "' of " + opName).str();
    bool typeOk = false;
    switch (spec.type) {
    case AttrType::Int:
      typeOk = value.isInt();
      break;
    case AttrType::Float:
      typeOk = value.isInt() || value.isFloat();
      break;
    case AttrType::String:
      typeOk = value.isString();
      break;
    }
    if (!typeOk) {
      error(op.getLoc(), what + " must be " + describeType(spec.type));
      return;
    }
    if (spec.type == AttrType::String)
      return;
    double number = value.getNumber();
    // !(a <= b) also catches NaN.
    if (!(number >= spec.min) || !(number <= spec.max)) {
      std::string shown;
      llvm::raw_string_ostream os(shown);
      printAttribute(value, os);
      error(op.getLoc(), what + " must be in [" + formatBound(spec.min) + ", " +
                             formatBound(spec.max) + "], got " + os.str());
    }
  }

  DiagnosticEngine &diagnostics;
};

} // namespace

bool verify(const Module &module, DiagnosticEngine &diagnostics) {
  Verifier verifier(diagnostics);
  return verifier.verifyModule(module);
}

bool verify(const Query &query, DiagnosticEngine &diagnostics) {
  Verifier verifier(diagnostics);
  verifier.verifyQuery(query);
  return verifier.numErrors == 0;
}

} // namespace spanc::ir
