//===- RewriteDriver.cpp - Match/rewrite patterns applied to a fixed point ===//

#include "passes/RewriteDriver.h"

#include "passes/DeadOps.h"
#include "passes/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

namespace spanc::passes {

void PatternRewriter::replaceOp(ir::Op *op, ir::Op *replacement) {
  op->replaceAllUsesWith(replacement);
  maybeDead.push_back(op);
  if (op == visited)
    visitedReplaced = true;
}

llvm::Expected<size_t>
applyPatternsGreedily(ir::Query &query,
                      llvm::ArrayRef<const RewritePattern *> patterns) {
  PatternRewriter rewriter;
  size_t numRewrites = 0;
  for (unsigned sweep = 0; sweep < kMaxSweeps; ++sweep) {
    size_t before = numRewrites;
    // Ops a rewrite inserts go before the visited op, so the sweep meets
    // them next time; the ones it leaves unused are erased only after it.
    for (ir::Op &op : llvm::make_early_inc_range(query.getOps())) {
      rewriter.visited = &op;
      rewriter.visitedReplaced = false;
      for (const RewritePattern *pattern : patterns) {
        if (!pattern->match(op))
          continue;
        rewriter.setInsertionPoint(&op);
        rewriter.setLoc(op.getLoc());
        pattern->rewrite(op, rewriter);
        ++numRewrites;
        if (rewriter.visitedReplaced)
          break;
      }
    }
    rewriter.visited = nullptr;
    eraseDeadOps(rewriter.maybeDead);
    rewriter.maybeDead.clear();
    if (numRewrites == before)
      return numRewrites;
  }
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the rewrites of query '@%s' did not settle after %u sweeps (a pass "
      "whose rules undo each other)",
      query.getName().str().c_str(), kMaxSweeps);
}

bool applyPatternsInPass(ir::Query &query,
                         llvm::ArrayRef<const RewritePattern *> patterns,
                         PassContext &context) {
  llvm::Expected<size_t> rewrites = applyPatternsGreedily(query, patterns);
  if (!rewrites) {
    context.getDiagnostics().error(query.getLoc(),
                                   llvm::toString(rewrites.takeError()));
    return false;
  }
  context.addRewrites(*rewrites);
  return true;
}

} // namespace spanc::passes
