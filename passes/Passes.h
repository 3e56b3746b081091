//===- Passes.h - Factories of the optimizer passes -----------------------===//
//
// Each pass lives in its own file and registers itself with the pass
// manager by name; these factories are for code that builds a pipeline
// directly. The lit tests under test/lit/<pass-name>/ specify each pass.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PASSES_PASSES_H
#define SPANC_PASSES_PASSES_H

#include "passes/PassManager.h"

#include <memory>

namespace spanc::passes {

/// desugar-chat: chat(m...) -> gen(cross(m...)).
std::unique_ptr<Pass> createDesugarChatPass();
/// desugar-retrieve: retrieve -> + of the top-k fragments by BM25.
std::unique_ptr<Pass> createDesugarRetrievePass();
/// plus-simplify: flatten joins, drop empty spans, unwrap singletons.
std::unique_ptr<Pass> createPlusSimplifyPass();
/// plus-distribute: G(x) under a consumed + becomes cross(x, G(x)).
std::unique_ptr<Pass> createPlusDistributePass();
/// tree-reduce: a gen over a wide + becomes a k-ary tree of gens.
std::unique_ptr<Pass> createTreeReducePass();
/// bulk-order: queries sharing fragments run next to each other.
std::unique_ptr<Pass> createBulkOrderPass();
/// cse: identical deterministic subtrees are computed once.
std::unique_ptr<Pass> createCommonSubtreesPass();

} // namespace spanc::passes

#endif // SPANC_PASSES_PASSES_H
