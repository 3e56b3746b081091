//===- Stack.h - Run a recursive walk on a stack sized for it -------------===//
//
// The frontend's inlining of lets and the lowering to a plan recurse once
// per nesting level, and the verifier bounds nesting at kMaxNestingDepth
// (ir/IR.h). How much stack that takes depends on the build (several times
// more under the sanitizers, whose frames keep every local apart) and the
// calling thread's stack is whatever its creator chose, so those walks run
// on a thread of their own whose stack is sized for the bound.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_STACK_H
#define SPANC_IR_STACK_H

#include "llvm/ADT/STLFunctionalExtras.h"

namespace spanc::ir {

/// The stack a recursive walk runs on. kMaxNestingDepth levels take about
/// 2 MiB in an optimized build and between 8 and 16 MiB under ASan
/// (test/unit/codegen and test/unit/frontend walk programs at the bound);
/// only the pages a walk touches are ever backed by memory.
constexpr unsigned kWalkStackBytes = 64u << 20;

/// Runs `walk` to completion on a thread with a kWalkStackBytes stack.
void runOnWalkStack(llvm::function_ref<void()> walk);

} // namespace spanc::ir

#endif // SPANC_IR_STACK_H
