//===- CommonSubtrees.cpp - cse: compute identical deterministic work once ===//
//
// Two ops of a query with the same kind, text, attributes and operands (the
// same SSA values, in order) compute the same span when the op is
// deterministic, so the later one is replaced by the earlier. Leaves, joins,
// retrieve and monad are deterministic; a gen or chat only with temperature
// 0; a repeat only when nothing under its body samples, because each of its
// n samples re-runs the whole body. A gen at temperature > 0 (or with none
// given) is a fresh sample each time and is never merged.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallVector.h"

#include <cstring>

namespace spanc::passes {

namespace {

using ir::Op;
using ir::OpKind;

bool isGreedy(const Op &op) {
  std::optional<double> temperature = op.getNumberAttr("temperature");
  return temperature && *temperature == 0;
}

llvm::hash_code hashAttribute(const ir::Attribute &value) {
  switch (value.kind()) {
  case ir::Attribute::Kind::Int:
    return llvm::hash_value(value.getInt());
  case ir::Attribute::Kind::Float: {
    double number = value.getFloat();
    uint64_t bits;
    std::memcpy(&bits, &number, sizeof(bits));
    return llvm::hash_value(bits);
  }
  case ir::Attribute::Kind::String:
    return llvm::hash_value(value.getString());
  }
  return {};
}

llvm::hash_code hashOp(const Op &op) {
  llvm::hash_code hash = llvm::hash_combine(op.getKind(), op.getText());
  for (const ir::NamedAttribute &attr : op.getAttributes())
    hash = llvm::hash_combine(hash, llvm::StringRef(attr.name),
                              hashAttribute(attr.value));
  for (const Op *operand : op.operandValues())
    hash = llvm::hash_combine(hash, operand);
  return hash;
}

bool isSameComputation(const Op &a, const Op &b) {
  if (a.getKind() != b.getKind() || a.getText() != b.getText() ||
      a.getNumOperands() != b.getNumOperands())
    return false;
  llvm::ArrayRef<ir::NamedAttribute> attrsA = a.getAttributes(),
                                     attrsB = b.getAttributes();
  if (attrsA.size() != attrsB.size())
    return false;
  for (size_t i = 0; i < attrsA.size(); ++i)
    if (attrsA[i].name != attrsB[i].name || attrsA[i].value != attrsB[i].value)
      return false;
  for (unsigned i = 0; i < a.getNumOperands(); ++i)
    if (a.getOperand(i) != b.getOperand(i))
      return false;
  return true;
}

/// Ops as DenseSet keys, equal when they compute the same thing.
struct ComputationInfo {
  static Op *getEmptyKey() { return llvm::DenseMapInfo<Op *>::getEmptyKey(); }
  static Op *getTombstoneKey() {
    return llvm::DenseMapInfo<Op *>::getTombstoneKey();
  }
  static unsigned getHashValue(const Op *op) {
    return static_cast<unsigned>(static_cast<size_t>(hashOp(*op)));
  }
  static bool isEqual(const Op *a, const Op *b) {
    if (a == b)
      return true;
    if (a == getEmptyKey() || a == getTombstoneKey() || b == getEmptyKey() ||
        b == getTombstoneKey())
      return false;
    return isSameComputation(*a, *b);
  }
};

class CommonSubtreesPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &) override {
    for (auto &query : module.getQueries())
      runOnQuery(*query);
    return true;
  }

private:
  static void runOnQuery(ir::Query &query) {
    // scratch = 1 when everything an op computes, down to the leaves, is
    // deterministic (what a repeat needs of its body); by program order,
    // so operands are known first.
    for (Op &op : query.getOps())
      op.scratch = 0;
    llvm::DenseSet<Op *, ComputationInfo> seen;
    llvm::SmallVector<Op *, 16> duplicates;
    for (Op &op : query.getOps()) {
      bool operandsDeterministic =
          llvm::all_of(op.operandValues(), [&](const Op *operand) {
            return operand && operand->scratch;
          });
      bool mergeable;
      switch (op.getKind()) {
      case OpKind::Yield:
        continue;
      case OpKind::Gen:
      case OpKind::Chat:
        mergeable = isGreedy(op);
        op.scratch = mergeable && operandsDeterministic;
        break;
      case OpKind::Repeat:
        mergeable = operandsDeterministic;
        op.scratch = operandsDeterministic;
        break;
      default:
        mergeable = true;
        op.scratch = operandsDeterministic;
        break;
      }
      if (!mergeable)
        continue;
      auto [it, inserted] = seen.insert(&op);
      if (inserted)
        continue;
      op.replaceAllUsesWith(*it);
      duplicates.push_back(&op);
    }
    // A duplicate's operands are its twin's, so they stay in use.
    for (Op *op : duplicates)
      op->erase();
  }
};

} // namespace

std::unique_ptr<Pass> createCommonSubtreesPass() {
  return std::make_unique<CommonSubtreesPass>();
}

static PassRegistration registration(
    "cse",
    "compute identical deterministic subtrees (leaves, temperature-0 gens) "
    "once",
    createCommonSubtreesPass);

} // namespace spanc::passes
