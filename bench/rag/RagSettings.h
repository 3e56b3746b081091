//===- RagSettings.h - The settings of `spanc bench rag` ------------------===//
//
// What `spanc bench rag --set KEY=VALUE` reads (bench/rag/README.md, the
// registration's --list text), read all at once and checked before the
// model loads.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_RAG_RAGSETTINGS_H
#define SPANC_BENCH_RAG_RAGSETTINGS_H

#include "bench/common/Bench.h"
#include "runtime/kv/SpanLayout.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace spanc::bench {

/// The settings of `spanc bench rag`, read and checked.
struct RagSettings {
  std::vector<int64_t> documentCounts;
  int64_t documentTokens = 0;
  /// Repetitions per document count (the last value repeats); -r N sets
  /// every count to N.
  std::vector<int64_t> repetitionList;
  /// The peer's own repetitions per count: llama-server prefills a long
  /// prompt 2-3x slower than our stock path on two cores (~50 s at 15
  /// documents, twice per repetition), so it runs the first few only.
  std::vector<int64_t> peerRepetitionList;
  /// No new repetition starts after this many seconds (a shared machine's
  /// load decides how many fit; rag.md says how many ran).
  int64_t budgetSeconds = 0;
  /// The defaults hold two 8k contexts; the paper's scale (32 documents of
  /// 2857 tokens on a GPU, bench/gpu.sh) needs more of both.
  int64_t cacheTokens = 0, stepTokens = 0;
  std::vector<kv::RelocationMode> relocations;
  /// The span accuracy modes beside stock (issue 14): each its own
  /// executor, rope-in-kernel only, to keep the run's time.
  std::vector<kv::SpanOptions> spanModes;
  std::string peer;
  /// -r N, or 0.
  int repetitionsOverride = 0;
  /// The default span options with rope-in-kernel are what the
  /// span-*-rope-in-kernel rows measure already.
  kv::SpanOptions defaultSpan;

  int valueFor(llvm::ArrayRef<int64_t> list, int64_t docs) const {
    size_t index =
        size_t(llvm::find(documentCounts, docs) - documentCounts.begin());
    return int(list[std::min(index, list.size() - 1)]);
  }
  int repetitionsFor(int64_t docs) const {
    return repetitionsOverride > 0 ? repetitionsOverride
                                   : valueFor(repetitionList, docs);
  }
  int peerRepetitionsFor(int64_t docs) const {
    return std::min(repetitionsFor(docs), valueFor(peerRepetitionList, docs));
  }
  /// Whether `mode` is the default one, measured by the
  /// span-*-rope-in-kernel rows: such a mode reads those rows instead of
  /// running the same executor twice. A mode's name spells every setting
  /// (blend and scaling included), so equal names are the same mode.
  bool isAlias(const kv::SpanOptions &mode) const {
    return llvm::is_contained(relocations, kv::RelocationMode::RopeInKernel) &&
           kv::spanModeName(mode) == kv::spanModeName(defaultSpan);
  }
  /// The rows of a mode: "span-hit-isolated", or "span-hit-rope-in-kernel"
  /// for the default mode.
  std::string modeConfig(const char *kind, const kv::SpanOptions &mode) const {
    return std::string("span-") + kind + "-" +
           (isAlias(mode) ? std::string("rope-in-kernel")
                          : kv::spanModeName(mode));
  }
};

/// Reads every setting first (so a typo fails before the model loads),
/// then checks their ranges.
llvm::Expected<RagSettings> readRagSettings(const BenchArgs &args);

} // namespace spanc::bench

#endif // SPANC_BENCH_RAG_RAGSETTINGS_H
