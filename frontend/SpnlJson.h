//===- SpnlJson.h - Import IBM spnl's JSON query form into span IR --------===//
//
// spnl writes a query as externally tagged JSON nodes:
//   {"g": {"model": M, "input": Q, "max_tokens": N, "temperature": T}}
//   {"plus": [Q...]}  {"cross": [Q...]}  {"seq": [Q...]}  {"par": [Q...]}
//   {"repeat": {"n": N, "query": Q}}  (or "g"/"generate": a g body)
//   {"map": {"metadata": {model, max_tokens, temperature}, "inputs": [S...]}}
//   {"user": S}  {"system": S}  {"assistant": S}  {"print": S}  {"monad": Q}
//   {"zip": {"first": Q, "second": Q}}
//   {"augment": {"embedding_model": E, "body": Q, "doc": [NAME, DOC]}}
//   {"bulk": B}, {"Repeat": R}, {"Map": M}  (the bodies of repeat and map)
// and a JSON array where a node is expected is an ordered list (a cross).
// Inside a g's input `seq` is spnl's ordered list of messages and becomes a
// span.cross, so the passes see the shape they optimize (plus-distribute
// over g(seq[system, plus[repeat{g}], user]), as spnl's own optimizer
// does); elsewhere it orders execution and becomes span.seq. `par` becomes
// span.par, a map a span.plus of one span.gen per input, a zip the join
// spnl's executor makes of it, an augment span.plus(span.retrieve) over the
// corpus NAME, and `print` is dropped from the model input with a note.
// A g's `max_tokens: 0` (spnl's default: as many as the server allows) is
// left out, as an absent one, for the compiler's default.
// Unknown keys and malformed nodes are errors that name the JSON path
// (e.g. /g/input/cross/1) and point at the node.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_SPNLJSON_H
#define SPANC_FRONTEND_SPNLJSON_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include <cstdint>
#include <memory>

namespace spanc::frontend {

struct SpnlImportOptions {
  /// How many fragments an augment retrieves.
  int64_t augmentK = 4;
};

/// Imports buffer `bufferId` of the engine's SourceMgr as one query named
/// after the file (its stem). Returns null after reporting errors.
std::unique_ptr<ir::Module>
importSpnlJson(unsigned bufferId, ir::DiagnosticEngine &diagnostics,
               const SpnlImportOptions &options = {});

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_SPNLJSON_H
