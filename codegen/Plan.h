//===- Plan.h - The physical plan: a DAG of model calls with segments -----===//
//
// What codegen lowers optimized span IR to (DESIGN §5). A call's input is a
// list of segments carried out of band: `prefix` (ordinary causal tokens),
// `span` (an independent child of a plus: tokenized on its own, attends only
// to itself) and `tail` (what follows a plus; attends to everything before
// it). A segment's tokens are pieces: literal token ids known at compile
// time, or the output of another call, which the executor splices in as the
// token ids that call produced (never re-tokenized text), so an outer call's
// span blocks are token for token the inner call's.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_CODEGEN_PLAN_H
#define SPANC_CODEGEN_PLAN_H

#include "runtime/kv/KvCacheManager.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spanc::codegen {

using CallId = uint32_t;
using kv::SegmentKind;
using kv::TokenId;

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
};

/// Sampling and stopping options of one call (the span.gen attributes).
struct GenOptions {
  int64_t maxTokens = 256;
  double temperature = 0.0;
  double topP = 1.0;
  int64_t topK = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
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

/// Prints the plan for `spanc compile --emit=plan`: calls, options,
/// dependencies, segments with their pieces, and — for calls whose tokens
/// are all known at compile time — logical positions, block boundaries and
/// block hashes as the KV cache manager computes them.
struct PlanPrintOptions {
  unsigned blockSize = 16;
  kv::CacheMode cacheMode = kv::CacheMode::Span;
  /// Print every token id (else only counts and the first few).
  bool printTokens = false;
};
void printPlan(const Plan &plan, const kv::BlockHasher &hasher,
               const PlanPrintOptions &options, llvm::raw_ostream &os);

} // namespace spanc::codegen

#endif // SPANC_CODEGEN_PLAN_H
