//===- Verifier.cpp - Check that span IR is well formed -------------------===//

#include "ir/Verifier.h"

#include "ir/Printer.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace spanc::ir {

namespace {

/// A bound as a reader expects it: whole numbers without a fraction.
std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (std::fabs(value) < 1e15 && value == std::floor(value))
    os << static_cast<int64_t>(value);
  else
    os << llvm::format("%g", value);
  return os.str();
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
    // Numbering and checking share one walk over the op list (after passes
    // the ops are scattered in memory, so each walk is mostly cache misses).
    // An op is numbered when the walk reaches it; `order` maps numbers back
    // to ops, so an operand whose number is stale (not reached yet) fails
    // `order[number] == operand` and is reported as used before defined.
    order.clear();
    depths.clear();
    numberedAll = false;
    depthReported = false;
    const Op *yield = nullptr;
    for (const Op &op : query.getOps()) {
      op.scratch = static_cast<unsigned>(order.size());
      order.push_back(&op);
      depths.push_back(1);
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

  // The checks below run for every op of every query after every pass, so
  // the success path builds no strings: messages (op names, operand and
  // attribute descriptions) are composed only once something is wrong.

  static std::string opName(const OpInfo &info) {
    return std::string("'span.") + info.name + "'";
  }

  static std::string operandName(const OpInfo &info, unsigned index) {
    return opName(info) + " operand #" + std::to_string(index);
  }

  /// The index of the spec named `name` in `info.attributes`, or -1. Compares
  /// without strlen: the names are short and this runs once per attribute.
  static int findSpec(const OpInfo &info, llvm::StringRef name) {
    for (size_t i = 0, e = info.attributes.size(); i < e; ++i) {
      const char *specName = info.attributes[i].name;
      if (std::strncmp(specName, name.data(), name.size()) == 0 &&
          specName[name.size()] == '\0')
        return static_cast<int>(i);
    }
    return -1;
  }

  void verifyOp(const Op &op, const Query &query) {
    const OpInfo &info = op.getInfo();
    unsigned numOperands = op.getNumOperands();
    if (info.maxOperands == OpInfo::kVariadic) {
      if (numOperands < info.minOperands)
        error(op.getLoc(),
              opName(info) + " takes at least " +
                  llvm::Twine(info.minOperands) +
                  (info.minOperands == 1 ? " operand" : " operands") +
                  ", got " + llvm::Twine(numOperands) +
                  (op.getKind() == OpKind::Plus
                       ? " (a plus of nothing joins no span: give it the "
                         "spans it should hold)"
                       : ""));
    } else if (numOperands < info.minOperands ||
               numOperands > info.maxOperands) {
      error(op.getLoc(),
            opName(info) + " takes " + llvm::Twine(info.minOperands) +
                (info.minOperands == 1 ? " operand" : " operands") + ", got " +
                llvm::Twine(numOperands));
    }
    for (unsigned i = 0; i < numOperands; ++i) {
      const Op *operand = op.getOperand(i);
      if (!operand) {
        error(op.getLoc(),
              operandName(info, i) + " refers to an op that was erased");
        continue;
      }
      if (operand->getParent() != &query) {
        error(op.getLoc(), operandName(info, i) +
                               " is defined outside query '@" +
                               query.getName() + "'");
        continue;
      }
      if (!operand->hasResult()) {
        error(op.getLoc(),
              operandName(info, i) + " is a span.yield, which has no result");
        continue;
      }
      if (operand->scratch >= op.scratch ||
          order[operand->scratch] != operand) {
        // Number the whole query so that the message names the operand by
        // its real number (renumbering gives reached ops the same numbers).
        if (!numberedAll) {
          query.numberOps();
          numberedAll = true;
        }
        error(op.getLoc(), operandName(info, i) + " (%" +
                               llvm::Twine(operand->scratch) +
                               ") is used before it is defined");
        continue;
      }
      depths[op.scratch] =
          std::max(depths[op.scratch], depths[operand->scratch] + 1);
    }
    // Reported once per query, at the first op past the bound: every op
    // that uses it is deeper still.
    if (depths[op.scratch] > kMaxNestingDepth && !depthReported) {
      depthReported = true;
      error(op.getLoc(), opName(info) + " is nested more than " +
                             llvm::Twine(kMaxNestingDepth) +
                             " levels deep (each op is a level, lets "
                             "inlined); spanc supports at most " +
                             llvm::Twine(kMaxNestingDepth));
    }

    bool wantsText = info.text != TextPosition::None;
    if (!wantsText && !op.getText().empty())
      error(op.getLoc(), opName(info) + " has no text, but text is set");
    if (info.text == TextPosition::Query && op.getText().empty())
      error(op.getLoc(), opName(info) + " needs a non-empty query text");

    // Which specs the op carries, for the "required" check without a second
    // lookup per spec (schemas have a handful of attributes).
    uint64_t present = 0;
    for (const NamedAttribute &attr : op.getAttributes()) {
      int index = findSpec(info, attr.name);
      if (index < 0) {
        error(op.getLoc(), "unknown attribute '" + attr.name + "' on " +
                               opName(info) + "; " + listAttributes(info));
        continue;
      }
      if (index < 64)
        present |= uint64_t(1) << index;
      verifyAttribute(op, info, info.attributes[index], attr.value);
    }
    for (size_t i = 0, e = info.attributes.size(); i < e; ++i) {
      const AttrSpec &spec = info.attributes[i];
      if (!spec.required)
        continue;
      bool has = i < 64 ? (present >> i) & 1 : op.hasAttr(spec.name);
      if (!has)
        error(op.getLoc(),
              opName(info) + " needs attribute '" + spec.name + "'");
    }
  }

  static std::string describeAttribute(const OpInfo &info,
                                       const AttrSpec &spec) {
    return ("attribute '" + llvm::Twine(spec.name) + "' of " + opName(info))
        .str();
  }

  void verifyAttribute(const Op &op, const OpInfo &info, const AttrSpec &spec,
                       const Attribute &value) {
    std::string problem = checkAttribute(spec, value);
    if (!problem.empty())
      error(op.getLoc(), describeAttribute(info, spec) + " " + problem);
  }

  DiagnosticEngine &diagnostics;
  /// The ops of the query being verified, by number (kept across queries
  /// for its capacity).
  std::vector<const Op *> order;
  /// Whether the query being verified has been numbered in full.
  bool numberedAll = false;
  /// Each op's nesting depth (1 for a leaf), by number.
  std::vector<unsigned> depths;
  /// Whether the query being verified nests too deep (said once).
  bool depthReported = false;
};

} // namespace

std::string checkAttribute(const AttrSpec &spec, const Attribute &value) {
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
  if (!typeOk)
    return std::string("takes ") + describeAttrType(spec.type) + ", not " +
           describeAttrKind(value.kind());
  if (spec.type == AttrType::String)
    return {};
  double number = value.getNumber();
  // !(a <= b) also catches NaN.
  if (number >= spec.min && number <= spec.max)
    return {};
  std::string shown;
  llvm::raw_string_ostream os(shown);
  printAttribute(value, os);
  // A count's upper bound is there only to keep numbers sane: shown only
  // when it was passed, and a bound of 0 reads better as "not negative".
  bool isCount = spec.max >= 1e9;
  if (isCount && number > spec.max)
    return "is out of range: must be at most " + formatNumber(spec.max) +
           ", got " + os.str();
  if (isCount && spec.min == 0)
    return "must not be negative, got " + os.str();
  if (isCount)
    return "must be at least " + formatNumber(spec.min) + ", got " + os.str();
  return "must be in [" + formatNumber(spec.min) + ", " +
         formatNumber(spec.max) + "], got " + os.str();
}

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
