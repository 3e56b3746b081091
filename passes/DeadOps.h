//===- DeadOps.h - Erase the ops a rewrite left without users -------------===//
//
// Passes replace ops and then erase what nothing uses any more. Only the
// ops a pass names (and, transitively, their operands that become unused)
// are erased, so a pass never removes unrelated ops of its input. The
// rewrite driver (RewriteDriver.h) erases this way after each sweep.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PASSES_DEADOPS_H
#define SPANC_PASSES_DEADOPS_H

#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"

namespace spanc::passes {

/// Erases every op of `candidates` that has no users and is not a yield,
/// then the operands of erased ops that became unused, and so on. A
/// candidate may appear several times or be erased on the way as another's
/// operand; pointers to erased ops are never followed.
void eraseDeadOps(llvm::ArrayRef<ir::Op *> candidates);

} // namespace spanc::passes

#endif // SPANC_PASSES_DEADOPS_H
