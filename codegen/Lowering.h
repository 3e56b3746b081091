//===- Lowering.h - Optimized span IR to the physical plan ----------------===//
//
// Every span.gen becomes a call. Its input is flattened in order: messages
// and fragments become literal pieces, inner gens become their output
// spliced in as an assistant message, and each operand of a span.plus
// becomes a `span` segment of its own. Consecutive causal pieces before the
// first plus form the `prefix`; causal pieces after a plus form a `tail`.
// A call's input always ends with the assistant header, in a causal
// segment. span.repeat expands to n samples with distinct derived seeds
// (one call per sample unless the gen is deterministic); span.seq orders
// execution; span.monad's calls run for their cache effect only.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_CODEGEN_LOWERING_H
#define SPANC_CODEGEN_LOWERING_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "plan/MessageEncoder.h"
#include "plan/Plan.h"

#include <optional>

namespace spanc::codegen {

using plan::MessageEncoder;
using plan::MessageRole;

/// The most model calls a plan may make by default (--max-calls).
constexpr int64_t kDefaultMaxCalls = 10000;

/// What a plan may hold. Lowering stops at the first op past a bound with
/// an error there, before any model runs: `repeat(1000000)` of a sampled
/// gen made a million calls and grew until it was killed.
struct LoweringLimits {
  /// The most model calls the plan may make; also the most samples all its
  /// repeats together may expand to (each is a call, an answer or part of
  /// a prompt).
  int64_t maxCalls = kDefaultMaxCalls;
  /// The model's context length: a call's prompt (as far as it is known
  /// before it runs, see plan::knownPromptTokens) and its max_tokens must
  /// fit it. 0: not checked (no model at hand).
  int64_t contextLength = 0;
  /// max_tokens of a gen that gives none; 0: plan::GenOptions' default.
  /// Where the context is known it is lowered so that the call fits: its
  /// prompt, each output spliced in counted at its call's max_tokens, and
  /// the answer. (spanc serve gives spnl queries its --max-tokens-limit:
  /// spnl's max_tokens 0 means as many as the server allows.)
  int64_t defaultMaxTokens = 0;
};

/// Lowers every query of `module` (in module order) into one plan. Reports
/// unsupported IR (an undesugared span.retrieve, a gen whose input has no
/// tokens) and a plan past `limits` through `diagnostics` and returns
/// nullopt.
std::optional<plan::Plan> lowerToPlan(const ir::Module &module,
                                      const MessageEncoder &encoder,
                                      ir::DiagnosticEngine &diagnostics,
                                      const LoweringLimits &limits = {});

} // namespace spanc::codegen

#endif // SPANC_CODEGEN_LOWERING_H
