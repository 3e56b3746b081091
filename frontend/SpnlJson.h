//===- SpnlJson.h - Import IBM spnl's JSON query form into span IR --------===//
//
// spnl writes a query as externally tagged JSON nodes:
//   {"g": {"model": M, "input": Q, "max_tokens": N, "temperature": T}}
//   {"plus": [Q...]}  {"cross": [Q...]}  {"seq": [Q...]}  {"par": [Q...]}
//   {"repeat": {"n": N, "query": Q}}  (or "g"/"generate": a g body)
//   {"map": {"metadata": {model, max_tokens, temperature}, "inputs": [S...]}}
//   {"user": S}  {"system": S}  {"assistant": S}  {"print": S}  {"monad": Q}
// and a JSON array where a node is expected is an ordered list (a cross).
// `seq` becomes span.seq (ordered, no span semantics), `par` span.par, a map
// a span.plus of one span.gen per input, and `print` is dropped from the
// model input with a note. Unknown keys and malformed nodes are errors that
// name the JSON path (e.g. /g/input/cross/1) and point at the node.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_SPNLJSON_H
#define SPANC_FRONTEND_SPNLJSON_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include <memory>

namespace spanc::frontend {

/// Imports buffer `bufferId` of the engine's SourceMgr as one query named
/// after the file (its stem). Returns null after reporting errors.
std::unique_ptr<ir::Module> importSpnlJson(unsigned bufferId,
                                           ir::DiagnosticEngine &diagnostics);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_SPNLJSON_H
