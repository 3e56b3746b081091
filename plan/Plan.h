//===- Plan.h - The physical plan: a DAG of model calls with segments -----===//
//
// What codegen lowers optimized span IR to and what the runtime executes
// (docs/ARCHITECTURE.md, "The plan"). A call's input is a list of segments
// (Segment.h). A segment's tokens are pieces: literal token ids known at
// compile time, or the output of another call, which the executor splices
// in as the token ids that call produced (never re-tokenized text), so an
// outer call's span blocks are token for token the inner call's.
//
// Plain values only: this library depends on nothing of codegen or the
// runtime, so both can depend on it.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PLAN_PLAN_H
#define SPANC_PLAN_PLAN_H

#include "plan/Segment.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spanc::plan {

using CallId = uint32_t;

/// Part of a segment: literal tokens, or a call's output framed as an
/// assistant message (header + generated tokens + end of turn).
struct Piece {
  /// Literal tokens; for a call output, the header that precedes it.
  std::vector<TokenId> tokens;
  /// Set for a call output.
  std::optional<CallId> call;
  /// For a call output: the end-of-turn tokens that follow it.
  std::vector<TokenId> trailer;
  /// What the piece came from, for --emit=plan ("system", "fragment", ...).
  std::string label;
};

struct PlanSegment {
  SegmentKind kind = SegmentKind::Prefix;
  llvm::SmallVector<Piece, 2> pieces;
  /// See Segment::ownContext.
  bool ownContext = false;
};

/// Sampling and stopping options of one call (the span.gen attributes).
struct GenOptions {
  int64_t maxTokens = 256;
  double temperature = 0.0;
  double topP = 1.0;
  int64_t topK = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  /// Added to the logits before sampling: (token, bias) (OpenAI's
  /// logit_bias).
  std::vector<std::pair<TokenId, float>> logitBias;
  /// Record each generated token's log probability and those of the N
  /// likeliest tokens (CallOutcome::logprobs); -1: none.
  int32_t logprobs = -1;
  /// The model the program named (gen's `model`); empty: none named. The
  /// runtime runs the model it has; a server refuses another name.
  std::string model;
};

struct Call {
  CallId id = 0;
  /// The query this call belongs to (its first user, after cse).
  std::string query;
  GenOptions options;
  llvm::SmallVector<PlanSegment, 4> segments;
  /// Calls whose outputs this call's segments splice in.
  llvm::SmallVector<CallId, 4> dependencies;
  /// Run for its cache effect only (span.monad, --prepare-fragments).
  bool cacheOnly = false;
  /// Where the span.gen came from ("file:line:col"), for error messages.
  std::string location;
};

/// One element of a query's result: a call's output or literal text.
struct ResultItem {
  std::optional<CallId> call;
  std::string text;
};

struct QueryPlan {
  std::string name;
  /// The calls this query needs, in a valid execution order.
  std::vector<CallId> calls;
  std::vector<ResultItem> results;
};

struct Plan {
  /// In topological order: a call's dependencies come before it.
  std::vector<Call> calls;
  std::vector<QueryPlan> queries;
};

/// Token ids of a segment when every piece is known: the literal pieces,
/// with `outputs[call]` spliced in for call outputs. Returns nullopt when an
/// output is not known yet (`outputs` shorter than the call id, or empty
/// optional).
std::optional<std::vector<TokenId>>
resolveSegment(const PlanSegment &segment,
               llvm::ArrayRef<std::optional<std::vector<TokenId>>> outputs);

/// The tokens of `call`'s prompt known before any call runs: its literal
/// pieces, and for each call output spliced in its header and trailer (the
/// output itself may be empty). A lower bound of the prompt's length.
uint64_t knownPromptTokens(const Call &call);

/// All segments of `call` resolved (see resolveSegment), or nullopt.
std::optional<std::vector<Segment>>
resolveCall(const Call &call,
            llvm::ArrayRef<std::optional<std::vector<TokenId>>> outputs);

} // namespace spanc::plan

#endif // SPANC_PLAN_PLAN_H
