//===- RagProfile.h - Where a measured call's time went, by phase ---------===//
//
// `spanc bench rag` times every call it measures by phase
// (sched::PhaseProfile: the executor's steps, the forward pass by op) and
// rag.md carries, per configuration of interest, the median of each phase
// per document count beside the TTFT: where a span hit's time goes
// (issue 26; bench/results/hit-profile.md).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_RAG_RAGPROFILE_H
#define SPANC_BENCH_RAG_RAGPROFILE_H

#include "runtime/model/ModelConfig.h"
#include "runtime/sched/PhaseProfile.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>

namespace spanc::bench {

/// One call's phases in ms, flattened for medians.
struct PhaseBreakdown {
  double compileMs = 0;   ///< source → plan (before the run)
  double layoutMs = 0;    ///< positions, block hashes, page lists
  double lookupMs = 0;    ///< hash lookups, hits, allocation, runs
  double scheduleMs = 0;  ///< other admission, CIDRA's plan, the batch
  double relocateMs = 0;  ///< copies, relocations, repairs
  double attentionMs = 0; ///< the forward pass's attention (every layer)
  double gemmMs = 0;      ///< its QKV, output, gate|up and down GEMMs
  double otherMs = 0;     ///< its norms, RoPE, K/V writes, SwiGLU, residuals
  double headMs = 0;      ///< the output head
  double outsideMs = 0;   ///< the forward pass outside its ops (layout...)
  double sampleMs = 0;    ///< sampling and the scheduler's update
  double stepsMs = 0;     ///< every step, whole
  /// FLOP rates: attention's QK^T and PV over the pairs its rows saw, and
  /// the layers' weight multiplications over their rows (0 without time).
  double attentionGflops = 0, gemmGflops = 0;
  /// The layers' work, both kinds, in GFLOP.
  double layerGflop = 0;
  double steps = 0, passes = 0, sequences = 0, layers = 0;
};

/// `config` counts the FLOPs behind the forward pass's times.
PhaseBreakdown breakdownOf(const sched::PhaseProfile &profile,
                           const model::ModelConfig &config,
                           double compileSeconds);

/// One line for the progress log.
std::string describeBreakdown(const PhaseBreakdown &breakdown);

/// The table of medians per document count: `rows` holds (docs, TTFT ms,
/// breakdown) of one configuration's calls.
void writeBreakdownTable(
    llvm::raw_ostream &out, llvm::StringRef title,
    llvm::ArrayRef<std::pair<unsigned, std::pair<double, PhaseBreakdown>>>
        rows);

} // namespace spanc::bench

#endif // SPANC_BENCH_RAG_RAGPROFILE_H
