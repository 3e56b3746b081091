//===- CallOutcome.h - What a run reports per call, and its callbacks -----===//
//
// The results of Executor::run (one CallOutcome per call of the plan), the
// per-call statistics of --stats, and the streaming and progress callbacks.
// The scheduler records timing and cache figures, the model runner what the
// call generated (docs/ARCHITECTURE.md, "Running a plan").
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_CALLOUTCOME_H
#define SPANC_RUNTIME_SCHED_CALLOUTCOME_H

#include "plan/Plan.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace spanc::sched {

/// Per-call figures for --stats.
struct CallStats {
  double queuedSeconds = 0; ///< ready → admitted
  double ttftSeconds = 0;   ///< ready → first token sampled
  double totalSeconds = 0;  ///< ready → finished
  uint32_t promptTokens = 0;
  uint32_t computedTokens = 0;  ///< prompt tokens prefilled
  uint32_t reusedTokens = 0;    ///< prompt tokens found in the cache
  uint32_t relocatedTokens = 0; ///< reused tokens whose K was re-rotated
  /// Of reusedTokens, those of spans (children of a plus): the reuse that
  /// stock prefix caching cannot give when the spans move or reorder.
  uint32_t spanReusedTokens = 0;
  /// Span tokens a repair recomputed through every layer (kv::SpanOptions::
  /// blendPercent, guidedPercent); a blend's selection layers ran for all
  /// of them.
  uint32_t blendedTokens = 0;
  /// A question-guided repair's first pass: the probe tokens it ran over
  /// the stitched cache, and the seconds it took (the attention mass
  /// recorded included).
  uint32_t probeTokens = 0;
  double probeSeconds = 0;
  uint32_t generatedTokens = 0;
  uint32_t preemptions = 0;
  double decodeSeconds = 0; ///< first token → finished
  double hitRate() const {
    return promptTokens ? double(reusedTokens) / promptTokens : 0.0;
  }
  double decodeTokensPerSecond() const {
    return decodeSeconds > 0 && generatedTokens > 1
               ? (generatedTokens - 1) / decodeSeconds
               : 0.0;
  }
};

/// A generated token's log probability under the model (its logits before
/// any bias or temperature), and the likeliest tokens' (GenOptions::
/// logprobs of them, most likely first).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<plan::TokenId, float>> top;
};

struct CallOutcome {
  bool succeeded = false;
  std::string error; ///< why it failed
  std::vector<plan::TokenId> tokens;
  std::string text;
  /// Per token of `tokens`, with GenOptions::logprobs >= 0.
  std::vector<TokenLogprobs> logprobs;
  CallStats stats;
  /// The logits the first token was sampled from, with
  /// ExecutorOptions::keepFirstLogits (tests compare cache hits to misses).
  std::vector<float> firstLogits;
};

/// Streaming: a piece of text call `call` just produced.
using TokenCallback =
    std::function<void(plan::CallId call, llvm::StringRef piece)>;

/// Where a run stands, reported after every scheduler step (for a progress
/// line; cheap to produce: no per-call scan).
struct ExecutorProgress {
  size_t callsDone = 0; ///< finished or failed
  size_t callsTotal = 0;
  uint64_t tokensGenerated = 0; ///< by all calls of this run so far
};
using ProgressCallback = std::function<void(const ExecutorProgress &)>;

/// Asked between scheduler steps; true stops the run there (an interrupt):
/// running calls are released and every unfinished call fails with
/// "interrupted".
using StopCallback = std::function<bool()>;

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_CALLOUTCOME_H
