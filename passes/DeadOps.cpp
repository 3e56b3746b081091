//===- DeadOps.cpp - Erase the ops a rewrite left without users -----------===//

#include "passes/DeadOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace spanc::passes {

void eraseDeadOps(llvm::ArrayRef<ir::Op *> candidates) {
  // Nothing is allocated while erasing, so the address of an erased op
  // cannot come back as a live op: the set safely tells them apart.
  llvm::DenseSet<ir::Op *> erased;
  llvm::SmallVector<ir::Op *, 16> worklist(candidates.rbegin(),
                                           candidates.rend());
  llvm::SmallVector<ir::Op *, 4> operands;
  while (!worklist.empty()) {
    ir::Op *op = worklist.pop_back_val();
    if (erased.count(op) || !op->useEmpty() ||
        op->getKind() == ir::OpKind::Yield)
      continue;
    operands.clear();
    for (ir::Op *operand : op->operandValues())
      if (operand && !llvm::is_contained(operands, operand))
        operands.push_back(operand);
    erased.insert(op);
    op->erase();
    for (ir::Op *operand : operands)
      if (operand->useEmpty())
        worklist.push_back(operand);
  }
}

} // namespace spanc::passes
