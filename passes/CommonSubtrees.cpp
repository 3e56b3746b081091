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
#include "passes/RewriteDriver.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"
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

/// Whether `op` may be merged with an equal one: every op but a yield, a
/// sampling gen or chat, and a repeat whose body samples somewhere. Reads
/// the determinism flags markDeterministic left in scratch.
bool isMergeable(const Op &op) {
  switch (op.getKind()) {
  case OpKind::Yield:
    return false;
  case OpKind::Gen:
  case OpKind::Chat:
    return isGreedy(op);
  case OpKind::Repeat:
    return llvm::all_of(op.operandValues(), [](const Op *operand) {
      return operand && operand->scratch;
    });
  default:
    return true;
  }
}

/// An op equal to one before it is replaced by that one. The earliest of
/// each computation is kept in `seen`, which the driver's program order
/// fills before any later twin is visited.
class MergeTwin : public RewritePattern {
public:
  explicit MergeTwin(llvm::DenseSet<Op *, ComputationInfo> &seen)
      : seen(seen) {}

  bool match(Op &op) const override {
    if (!isMergeable(op))
      return false;
    // Recording the first of each computation is the analysis; the IR is
    // not changed here.
    return *seen.insert(&op).first != &op;
  }
  void rewrite(Op &op, PatternRewriter &rewriter) const override {
    // A twin's operands are the earlier op's, so they stay in use.
    rewriter.replaceOp(&op, *seen.find(&op));
  }

private:
  llvm::DenseSet<Op *, ComputationInfo> &seen;
};

class CommonSubtreesPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &context) override {
    for (auto &query : module.getQueries()) {
      markDeterministic(*query);
      llvm::DenseSet<Op *, ComputationInfo> seen;
      const MergeTwin merge(seen);
      const RewritePattern *patterns[] = {&merge};
      if (!applyPatternsInPass(*query, patterns, context))
        return false;
    }
    return true;
  }

private:
  /// scratch = 1 when everything an op computes, down to the leaves, is
  /// deterministic (what a repeat needs of its body); by program order, so
  /// operands are known first. Merging twins changes no flag: a twin's
  /// flag is its original's.
  static void markDeterministic(ir::Query &query) {
    for (Op &op : query.getOps()) {
      bool operandsDeterministic =
          llvm::all_of(op.operandValues(), [&](const Op *operand) {
            return operand && operand->scratch;
          });
      bool isSample =
          (op.getKind() == OpKind::Gen || op.getKind() == OpKind::Chat) &&
          !isGreedy(op);
      op.scratch = operandsDeterministic && !isSample;
    }
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
