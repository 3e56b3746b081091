//===- PlusDistribute.cpp - G(x) under a consumed + becomes x ⋈ G(x) ------===//
//
// The dual-output paradox (docs/ARCHITECTURE.md, "Compilation"): the KV of an
// inner gen's output was computed after that gen's input. When an outer gen
// consumes inner outputs as children of a +, each such child G(x) is rewritten
// to the span ⋈(x, G(x)), so the outer prefill meets exactly the blocks the
// inner call left in the cache. A repeat(n) of G(x) under such a + becomes
// repeat(n) of ⋈(x, G(x)): every sample is preceded by its own input.
//
// It does not fire
//  - on a + that no gen consumes (e.g. the query's result),
//  - on summands that are not gens (leaves, joins: nothing to line up),
//  - on a gen whose input is an empty join (x ⋈ G(x) would be G(x)),
//  - under a gen with `reduce` (tree-reduce bounds that gen's input for
//    attention locality; distributing would inflate it again),
// and never twice: a rewritten summand is a ⋈, not a gen.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/RewriteDriver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace spanc::passes {

namespace {

using ir::Op;
using ir::OpKind;

/// Some gen (or chat) reads this op's span, through + / ⋈ / repeat.
constexpr unsigned ReachesGen = 1;
/// ... and one of those gens carries `reduce`.
constexpr unsigned ReachesReducedGen = 2;

bool isModelCall(const Op *op) {
  return op->getKind() == OpKind::Gen || op->getKind() == OpKind::Chat;
}

bool propagatesConsumers(const Op *op) {
  return op->getKind() == OpKind::Plus || op->getKind() == OpKind::Cross ||
         op->getKind() == OpKind::Repeat;
}

bool hasEmptyInput(const Op *gen) {
  const Op *input = gen->getOperand(0);
  return (input->getKind() == OpKind::Plus ||
          input->getKind() == OpKind::Cross) &&
         input->getNumOperands() == 0;
}

bool isDistributable(const Op *op) {
  return op && op->getKind() == OpKind::Gen && !hasEmptyInput(op);
}

/// Under a + (or repeat) that gens consume, none with `reduce`: each child
/// G(x) becomes ⋈(x, G(x)). The flags come from the pass's analysis, in
/// each op's scratch field; a gen under several targets gets one ⋈, made
/// before the first.
class DistributeGens : public RewritePattern {
public:
  explicit DistributeGens(llvm::DenseMap<Op *, Op *> &distributed)
      : distributed(distributed) {}

  bool match(Op &op) const override {
    return (op.getKind() == OpKind::Plus || op.getKind() == OpKind::Repeat) &&
           op.scratch == ReachesGen &&
           llvm::any_of(op.operandValues(), isDistributable);
  }
  void rewrite(Op &op, PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < op.getNumOperands(); ++i) {
      Op *gen = op.getOperand(i);
      if (!isDistributable(gen))
        continue;
      Op *&span = distributed[gen];
      if (!span) {
        rewriter.setLoc(gen->getLoc());
        span = rewriter.createCross({gen->getOperand(0), gen});
      }
      op.setOperand(i, span);
    }
  }

private:
  /// gen -> ⋈(x, gen)
  llvm::DenseMap<Op *, Op *> &distributed;
};

class PlusDistributePass : public Pass {
public:
  bool run(ir::Module &module, PassContext &context) override {
    for (auto &query : module.getQueries()) {
      markConsumers(*query);
      llvm::DenseMap<Op *, Op *> distributed;
      const DistributeGens distribute(distributed);
      const RewritePattern *patterns[] = {&distribute};
      if (!applyPatternsInPass(*query, patterns, context))
        return false;
    }
    return true;
  }

private:
  /// Sets each op's scratch to the ReachesGen flags of its consumers.
  static void markConsumers(ir::Query &query) {
    // Users follow their operands, so a backward sweep knows every user's
    // consumers before the op itself.
    for (Op &op : llvm::reverse(query.getOps())) {
      unsigned flags = 0;
      for (ir::Use &use : op.uses()) {
        const Op *user = use.getOwner();
        if (isModelCall(user))
          flags |=
              ReachesGen | (user->hasAttr("reduce") ? ReachesReducedGen : 0);
        else if (propagatesConsumers(user))
          flags |= user->scratch;
      }
      op.scratch = flags;
    }
  }
};

} // namespace

std::unique_ptr<Pass> createPlusDistributePass() {
  return std::make_unique<PlusDistributePass>();
}

static PassRegistration registration(
    "plus-distribute",
    "under a + that a gen consumes, rewrite each child G(x) to x cross G(x)",
    createPlusDistributePass);

} // namespace spanc::passes
