//===- PlusSimplify.cpp - Flatten joins, drop empty spans, unwrap ---------===//
//
// Normalizes + and cross (⋈), both associative:
//   +(a, +(b, c))  -> +(a, b, c)      and  ⋈(a, ⋈(b, c)) -> ⋈(a, b, c)
//   +(a, ⋈(), "")  -> +(a)            (an empty join or empty fragment is
//                                      an empty span: dropped from + and ⋈)
//   +("", ⋈())     -> ⋈()             (a plus of empty spans is one; the IR
//                                      has no plus without operands)
//   ⋈(x)           -> x               (everywhere)
//   +(x)           -> x               only where nothing precedes it: as the
//                                      input of a gen, a child of + or par,
//                                      the body of monad or repeat, or the
//                                      query's result.
// A singleton + inside a ⋈ stays: there it says that x is an independent
// span that does not attend to the children before it, which unwrapping
// would change. seq and par are not joins of spans and are left alone.
//
//===----------------------------------------------------------------------===//

#include "passes/DeadOps.h"
#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

namespace spanc::passes {

namespace {

using ir::Op;
using ir::OpKind;

bool isSpanJoin(const Op *op) {
  return op->getKind() == OpKind::Plus || op->getKind() == OpKind::Cross;
}

bool isEmptySpan(const Op *op) {
  if (isSpanJoin(op))
    return op->getNumOperands() == 0;
  return op->getKind() == OpKind::Fragment && op->getText().empty();
}

/// Whether a singleton + may give its place in `user` to its child: true
/// where no sibling precedes it in the same model input.
bool canUnwrapPlusIn(const Op *user) {
  switch (user->getKind()) {
  case OpKind::Gen:
  case OpKind::Plus:
  case OpKind::Par:
  case OpKind::Monad:
  case OpKind::Repeat:
  case OpKind::Yield:
    return true;
  default:
    return false;
  }
}

class PlusSimplifyPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &) override {
    for (auto &query : module.getQueries()) {
      // Operands precede their users, so one forward sweep sees every
      // child already simplified; a second sweep confirms the fixed point.
      while (simplify(*query)) {
      }
    }
    return true;
  }

private:
  static bool simplify(ir::Query &query) {
    bool changed = false;
    llvm::SmallVector<Op *, 16> dead;
    llvm::SmallVector<Op *, 8> operands;
    for (Op &op : query.getOps()) {
      if (!isSpanJoin(&op))
        continue;
      operands.clear();
      bool rewritten = false;
      for (Op *operand : op.operandValues()) {
        if (operand->getKind() == op.getKind()) {
          operands.append(operand->operandValues().begin(),
                          operand->operandValues().end());
          dead.push_back(operand);
          rewritten = true;
        } else if (isEmptySpan(operand)) {
          dead.push_back(operand);
          rewritten = true;
        } else {
          operands.push_back(operand);
        }
      }
      if (rewritten && operands.empty() && op.getKind() == OpKind::Plus) {
        ir::Builder builder;
        builder.setInsertionPoint(&op);
        builder.setLoc(op.getLoc());
        op.replaceAllUsesWith(builder.createCross({}));
        dead.push_back(&op);
        changed = true;
        continue;
      }
      if (rewritten) {
        op.setOperands(operands);
        changed = true;
      }
      if (op.getNumOperands() == 1 && unwrap(op)) {
        changed = true;
        dead.push_back(&op);
      }
    }
    eraseDeadOps(dead);
    return changed;
  }

  /// Replaces the singleton join `op` by its child in the uses that allow
  /// it. Returns whether any use changed.
  static bool unwrap(Op &op) {
    Op *child = op.getOperand(0);
    llvm::SmallVector<ir::Use *, 4> uses;
    for (ir::Use &use : op.uses())
      if (op.getKind() == OpKind::Cross || canUnwrapPlusIn(use.getOwner()))
        uses.push_back(&use);
    for (ir::Use *use : uses)
      use->set(child);
    return !uses.empty();
  }
};

} // namespace

std::unique_ptr<Pass> createPlusSimplifyPass() {
  return std::make_unique<PlusSimplifyPass>();
}

static PassRegistration registration(
    "plus-simplify",
    "flatten + in + and cross in cross, drop empty spans, unwrap singletons",
    createPlusSimplifyPass);

} // namespace spanc::passes
