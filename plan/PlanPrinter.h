//===- PlanPrinter.h - The plan as text, for `spanc compile --emit=plan`
//---===//
//
// Calls, options, dependencies and segments with their pieces. How a call's
// blocks fall in the KV cache is the runtime's business: the caller passes
// a layout printer, which runs for every call whose tokens are all known at
// compile time (tools/spanc hands it the KV cache manager's layout).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PLAN_PLANPRINTER_H
#define SPANC_PLAN_PLANPRINTER_H

#include "plan/Plan.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::plan {

struct PlanPrintOptions {
  unsigned blockSize = 16;
  /// Print every token id (else only counts and the first few).
  bool printTokens = false;
};

/// Prints the layout of one call whose segments are all known.
using LayoutPrinter = llvm::function_ref<void(
    const Call &call, llvm::ArrayRef<Segment> segments, llvm::raw_ostream &os)>;

void printPlan(const Plan &plan, const PlanPrintOptions &options,
               LayoutPrinter printLayout, llvm::raw_ostream &os);

} // namespace spanc::plan

#endif // SPANC_PLAN_PLANPRINTER_H
