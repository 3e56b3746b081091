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

#include "passes/Passes.h"
#include "passes/RewriteDriver.h"

#include "llvm/ADT/STLExtras.h"
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

/// +(a, +(b, c)) -> +(a, b, c), and the same for ⋈.
struct FlattenNestedJoin : RewritePattern {
  bool match(Op &op) const override {
    return isSpanJoin(&op) &&
           llvm::any_of(op.operandValues(), [&](const Op *operand) {
             return operand->getKind() == op.getKind();
           });
  }
  void rewrite(Op &op, PatternRewriter &rewriter) const override {
    llvm::SmallVector<Op *, 8> operands;
    for (Op *operand : op.operandValues()) {
      if (operand->getKind() != op.getKind()) {
        operands.push_back(operand);
        continue;
      }
      operands.append(operand->operandValues().begin(),
                      operand->operandValues().end());
      rewriter.eraseIfUnused(operand);
    }
    op.setOperands(operands);
  }
};

/// An empty span leaves + and ⋈; a + of nothing but empty spans is one
/// (the IR has no plus without operands): +("", ⋈()) -> ⋈().
struct DropEmptySpans : RewritePattern {
  bool match(Op &op) const override {
    return isSpanJoin(&op) && llvm::any_of(op.operandValues(), isEmptySpan);
  }
  void rewrite(Op &op, PatternRewriter &rewriter) const override {
    llvm::SmallVector<Op *, 8> operands;
    for (Op *operand : op.operandValues()) {
      if (isEmptySpan(operand))
        rewriter.eraseIfUnused(operand);
      else
        operands.push_back(operand);
    }
    if (operands.empty() && op.getKind() == OpKind::Plus)
      rewriter.replaceOp(&op, rewriter.createCross({}));
    else
      op.setOperands(operands);
  }
};

/// ⋈(x) -> x everywhere; +(x) -> x where nothing precedes it
/// (canUnwrapPlusIn).
struct UnwrapSingleton : RewritePattern {
  bool match(Op &op) const override {
    return isSpanJoin(&op) && op.getNumOperands() == 1 &&
           llvm::any_of(op.uses(),
                        [&](const ir::Use &use) { return canUnwrap(op, use); });
  }
  void rewrite(Op &op, PatternRewriter &rewriter) const override {
    Op *child = op.getOperand(0);
    llvm::SmallVector<ir::Use *, 4> uses;
    for (ir::Use &use : op.uses())
      if (canUnwrap(op, use))
        uses.push_back(&use);
    for (ir::Use *use : uses)
      use->set(child);
    rewriter.eraseIfUnused(&op);
  }

private:
  static bool canUnwrap(const Op &op, const ir::Use &use) {
    return op.getKind() == OpKind::Cross || canUnwrapPlusIn(use.getOwner());
  }
};

class PlusSimplifyPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &context) override {
    // In this order on each op, as one rule: a join is flattened and
    // emptied before it is unwrapped.
    const FlattenNestedJoin flatten;
    const DropEmptySpans dropEmpty;
    const UnwrapSingleton unwrap;
    const RewritePattern *patterns[] = {&flatten, &dropEmpty, &unwrap};
    for (auto &query : module.getQueries()) {
      if (!applyPatternsInPass(*query, patterns, context))
        return false;
    }
    return true;
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
