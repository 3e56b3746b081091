//===- RewriteDriver.h - Match/rewrite patterns applied to a fixed point --===//
//
// A pass says its rules as patterns: `match` tells whether a rule applies to
// an op and changes no IR, `rewrite` applies it through a PatternRewriter.
// applyPatternsGreedily applies them as MLIR's greedy driver does, in
// sweeps: it visits a query's ops in program order (so an op's operands are
// rewritten before the op is visited), tries each pattern in turn on each
// op, and sweeps again until a sweep rewrites nothing. A rewrite must make
// its own match false (a rule that keeps matching what it wrote would sweep
// without end: the driver gives up after kMaxSweeps and says so).
//
// Ops a rewrite leaves without users (an op it replaced, operands it
// dropped) are erased after each sweep, with their operands that become
// unused in turn (DeadOps.h); ops that were unused in the input stay. The
// driver counts the rewrites, which passes report to the pass manager
// (PassContext::addRewrites, spanc opt --stats).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PASSES_REWRITEDRIVER_H
#define SPANC_PASSES_REWRITEDRIVER_H

#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstddef>

namespace spanc::passes {

class PassContext;
class RewritePattern;

/// What a rewrite may do besides building ops: it is an ir::Builder whose
/// insertion point and location are the matched op's.
class PatternRewriter : public ir::Builder {
public:
  /// Points every use of `op` at `replacement`; `op` is erased after the
  /// sweep, and no further pattern is tried on it.
  void replaceOp(ir::Op *op, ir::Op *replacement);
  /// Erases `op` after the sweep if nothing uses it then (an operand a
  /// rewrite dropped, a join that gave its uses away).
  void eraseIfUnused(ir::Op *op) { maybeDead.push_back(op); }

private:
  friend llvm::Expected<size_t>
  applyPatternsGreedily(ir::Query &query,
                        llvm::ArrayRef<const RewritePattern *> patterns);
  llvm::SmallVector<ir::Op *, 16> maybeDead;
  /// Whether the op being visited was replaced.
  bool visitedReplaced = false;
  ir::Op *visited = nullptr;
};

/// One rewrite rule. What an analysis found before the rewrites (which ops
/// a gen consumes, which are deterministic) lives in the pass, and its
/// patterns read it.
class RewritePattern {
public:
  virtual ~RewritePattern() = default;
  /// Whether this rule applies to `op`. Changes no IR.
  virtual bool match(ir::Op &op) const = 0;
  /// Applies the rule to `op`, which matched.
  virtual void rewrite(ir::Op &op, PatternRewriter &rewriter) const = 0;
};

/// Sweeps after which patterns that still rewrite are taken for a rule set
/// that never settles (a bug in a pass, not in a program).
constexpr unsigned kMaxSweeps = 1000;

/// Applies `patterns` to the ops of `query` until none applies; returns the
/// number of rewrites, or an error after kMaxSweeps sweeps.
llvm::Expected<size_t>
applyPatternsGreedily(ir::Query &query,
                      llvm::ArrayRef<const RewritePattern *> patterns);

/// applyPatternsGreedily as a pass runs it: the rewrites are added to
/// `context`'s count (--stats), and a rule set that never settles is an
/// error at the query; false then.
bool applyPatternsInPass(ir::Query &query,
                         llvm::ArrayRef<const RewritePattern *> patterns,
                         PassContext &context);

} // namespace spanc::passes

#endif // SPANC_PASSES_REWRITEDRIVER_H
