//===- Verifier.h - Check that span IR is well formed ---------------------===//
//
// Checks what the op schemas of ir/IR.h promise: operand counts, that every
// operand is a result defined earlier in the same query (not a yield), that
// attributes are known, of the right type and in range, that leaves and
// retrieve have text, that ops nest at most kMaxNestingDepth deep, and that
// each query ends with exactly one span.yield.
// Every problem is reported at the op's location; all are reported.
//
// The pass manager runs it after every pass (spanc opt, run, and compile
// --verify-each) or once after the last (spanc compile), and the frontend
// once before the passes; the IR a pipeline hands on is always verified.
// It is one walk over each query's ops that allocates nothing while the IR
// is well formed (messages are built on the error path only); verifying
// renumbers each query's ops (Op::scratch), as Query::numberOps() does.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_VERIFIER_H
#define SPANC_IR_VERIFIER_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include <string>

namespace spanc::ir {

/// Returns true if `module` is well formed; otherwise reports every problem
/// through `diagnostics` and returns false.
bool verify(const Module &module, DiagnosticEngine &diagnostics);
bool verify(const Query &query, DiagnosticEngine &diagnostics);

/// What is wrong with `value` as attribute `spec`, in words that follow the
/// attribute's name ("takes an integer, not a float"; "must be in [0, 2],
/// got 2.5"; "must not be negative, got -1"); empty when nothing is. The
/// one rule for attribute values: the verifier applies it to every op, the
/// frontends where an option is written, so that the user sees the value's
/// own location (and, in JSON, its path).
std::string checkAttribute(const AttrSpec &spec, const Attribute &value);

} // namespace spanc::ir

#endif // SPANC_IR_VERIFIER_H
