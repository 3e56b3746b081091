//===- SchedulerOutput.h - What passes between scheduler and runner -------===//
//
// Plain values, one of each per step (docs/ARCHITECTURE.md, "Running a
// plan"): the scheduler's decisions (SchedulerOutput: the block copies and
// relocations to run first, then the sequences of the forward batch with
// their tokens, positions, page lists, row kinds and whether they want
// logits) and the runner's report (RunnerOutput: the tokens it sampled).
// Both are reused from step to step; clear() keeps their capacity, so the
// steady state allocates nothing per token.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_SCHEDULEROUTPUT_H
#define SPANC_RUNTIME_SCHED_SCHEDULEROUTPUT_H

#include "plan/Plan.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/model/Forward.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <vector>

namespace spanc::sched {

/// One sequence of the step's forward batch. Its tokens, positions and
/// pages are ranges of SchedulerOutput's flat arrays.
struct ScheduledSequence {
  plan::CallId call = 0;
  model::RowKind rows = model::RowKind::Prompt;
  /// Logits of its last row: a decode token, or the last prompt chunk.
  bool wantsLogits = false;
  /// Sample the call's next token from those logits (not for a token fed
  /// only for its K/V after generation ended).
  bool sample = false;
  /// Its last row is the prompt's last token (the first token is sampled).
  bool completesPrompt = false;
  uint32_t firstToken = 0, numTokens = 0; ///< into tokens and positions
  uint32_t firstPage = 0, numPages = 0;   ///< into blockIds and validTokens
  /// Several compute runs of its call in one sequence (kv::ComputeRun::
  /// extendsPrevious): its tokens' logical indices (queryIndices) say
  /// where each sits in its page list.
  bool mergedRuns = false;
};

/// A repair segment to compute whole this step, before the forward batch
/// (kv::SpanOptions::blendPercent, guidedPercent; docs/ARCHITECTURE.md,
/// "Span attention"; SpanRepair runs it). The runner copies each span block
/// into its repair block, chooses the tokens to recompute (a blend: by how
/// far their K/V move over the first kv::kBlendSelectionLayers layers; a
/// question-guided repair: by the attention its probe, the segment after
/// the plus, gives them over the stitched cache) and recomputes through
/// every layer those and every forced block's tokens, each attending to
/// everything before it.
struct BlendTask {
  plan::CallId call = 0;
  uint32_t percent = 0;
  /// The pages before the plus, into blockIds and validTokens.
  uint32_t firstPage = 0, numContextPages = 0;
  /// Into blendBlocks, sourceBlocks, blendValidTokens, blendForced,
  /// blendCandidate and blendSpan.
  uint32_t firstBlock = 0, numBlocks = 0;
  /// Into tokens and positions: every token of the repair, in order.
  uint32_t firstToken = 0, numTokens = 0;
  /// A question-guided repair: how it ranks, and its probe (tokens into
  /// tokens and positions; its own blocks, after the repair's, into
  /// blockIds and validTokens).
  bool guided = false;
  kv::RepairLayers layers = kv::RepairLayers::All;
  kv::RepairGranularity granularity = kv::RepairGranularity::Block;
  uint32_t neighbours = 0;
  uint32_t firstProbeToken = 0, numProbeTokens = 0;
  uint32_t firstProbePage = 0, numProbePages = 0;
};

struct SchedulerOutput {
  /// Calls admitted when this step was scheduled.
  uint32_t admittedCalls = 0;
  /// Copy-on-write copies the last step's appends need
  /// (kv::DecodeSlot::copy), in order: run them first, before anything
  /// else writes K/V (the relocations included).
  std::vector<kv::RelocationOp> blockCopies;
  /// CIDRA's plan for this step (kv::KvCacheManager::planStep): run it
  /// after the copies, before the forward pass.
  kv::StepPlan stepPlan;
  /// Decode sequences first, then prefill chunks (a backend's order,
  /// StepLayout.h).
  std::vector<ScheduledSequence> sequences;
  std::vector<int32_t> tokens, positions;
  /// Per token of a prompt sequence, its logical index in the sequence's
  /// page list (decode tokens: -1).
  std::vector<int32_t> queryIndices;
  std::vector<int32_t> blockIds, validTokens;
  /// Per page, nonzero for a span page that the sequence reads with
  /// spanScaling (kv::SpanOptions::temperature, massScale).
  std::vector<uint8_t> spanPages;
  model::SpanScaling spanScaling;
  /// Blends to run before the batch, and their blocks.
  std::vector<BlendTask> blends;
  std::vector<int32_t> blendBlocks, sourceBlocks, blendValidTokens;
  std::vector<uint8_t> blendForced, blendCandidate;
  /// Per repair block: which span of the plus it mirrors (its segment).
  std::vector<uint32_t> blendSpan;

  llvm::ArrayRef<int32_t> tokensOf(const ScheduledSequence &sequence) const {
    return llvm::ArrayRef<int32_t>(tokens).slice(sequence.firstToken,
                                                 sequence.numTokens);
  }
  llvm::ArrayRef<int32_t> positionsOf(const ScheduledSequence &sequence) const {
    return llvm::ArrayRef<int32_t>(positions).slice(sequence.firstToken,
                                                    sequence.numTokens);
  }
  /// Empty unless the sequence merges runs.
  llvm::ArrayRef<int32_t>
  queryIndicesOf(const ScheduledSequence &sequence) const {
    if (!sequence.mergedRuns)
      return {};
    return llvm::ArrayRef<int32_t>(queryIndices)
        .slice(sequence.firstToken, sequence.numTokens);
  }
  llvm::ArrayRef<int32_t> blockIdsOf(const ScheduledSequence &sequence) const {
    return llvm::ArrayRef<int32_t>(blockIds).slice(sequence.firstPage,
                                                   sequence.numPages);
  }
  llvm::ArrayRef<int32_t>
  validTokensOf(const ScheduledSequence &sequence) const {
    return llvm::ArrayRef<int32_t>(validTokens)
        .slice(sequence.firstPage, sequence.numPages);
  }

  /// Empty when no page has a flag (a step built without them).
  llvm::ArrayRef<uint8_t> spanPagesOf(const ScheduledSequence &sequence) const {
    if (spanPages.empty())
      return {};
    return llvm::ArrayRef<uint8_t>(spanPages).slice(sequence.firstPage,
                                                    sequence.numPages);
  }

  /// Nothing to run: no copy, relocation, blend or sequence.
  bool empty() const {
    return blockCopies.empty() && stepPlan.relocation.empty() &&
           blends.empty() && sequences.empty();
  }

  void clear() {
    admittedCalls = 0;
    blockCopies.clear();
    stepPlan = kv::StepPlan();
    sequences.clear();
    tokens.clear();
    positions.clear();
    queryIndices.clear();
    blockIds.clear();
    validTokens.clear();
    spanPages.clear();
    spanScaling = model::SpanScaling();
    blends.clear();
    blendBlocks.clear();
    sourceBlocks.clear();
    blendValidTokens.clear();
    blendForced.clear();
    blendCandidate.clear();
    blendSpan.clear();
  }
};

/// A token the runner sampled for a sequence that asked for one.
struct SampledToken {
  uint32_t sequence = 0; ///< index into SchedulerOutput::sequences
  plan::TokenId token = 0;
  /// The token ends generation (end of turn); it is not part of the output.
  bool endOfGeneration = false;
  /// Generation is over: end of turn, a stop string or max_tokens.
  bool stop = false;
  /// It is the call's first token (the scheduler records the TTFT).
  bool first = false;
};

struct RunnerOutput {
  std::vector<SampledToken> sampled; ///< in sequence order
  void clear() { sampled.clear(); }
};

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_SCHEDULEROUTPUT_H
