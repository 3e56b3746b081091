//===- AccuracySettings.h - `spanc bench accuracy`'s settings ---*- C++ -*-===//
//
// The settings of `spanc bench accuracy` (its registration lists them),
// read and checked before the model loads.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_ACCURACY_ACCURACYSETTINGS_H
#define SPANC_BENCH_ACCURACY_ACCURACYSETTINGS_H

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace spanc::bench {

/// One configuration measured: full attention or a span mode.
struct Mode {
  std::string name;
  bool full = false;
  kv::SpanOptions span;
};

/// The settings of `spanc bench accuracy`, read and checked.
struct AccuracySettings {
  std::vector<int64_t> docCounts, docTokenList;
  /// Contexts per document count, one value per doc_tokens entry (the last
  /// repeats): fewer at 256 tokens, where a context of 16 documents is 4.3k
  /// tokens per mode and five modes cost ~1 s per question on two loaded
  /// cores (32 tokens: ~0.15 s); prose answers are twice as long.
  std::vector<int64_t> contextList;
  int64_t proseContexts = 0;
  /// Prose answers need more room: the model tends to restate the question
  /// ("The Ridgeback Climbing Gym is led by ... Leila") before the answer.
  int64_t maxTokens = 0, proseMaxTokens = 0, groupSize = 0, stepTokens = 0,
          recompute = 0;
  std::vector<Mode> modes;
  std::vector<std::string> tasks;
  /// -r N, or 0.
  int repetitionsOverride = 0;

  bool runs(llvm::StringRef task) const {
    return llvm::is_contained(tasks, task.str());
  }
  int64_t contextsFor(size_t lengthIndex) const {
    if (repetitionsOverride > 0)
      return int64_t(repetitionsOverride);
    return contextList[std::min(lengthIndex, contextList.size() - 1)];
  }
  int64_t proseContextCount() const {
    return repetitionsOverride > 0 ? int64_t(repetitionsOverride)
                                   : proseContexts;
  }
  /// The answer length of a task's questions: multihop asks for two codes.
  int64_t maxTokensFor(llvm::StringRef task) const {
    return task == "codes"      ? maxTokens
           : task == "multihop" ? 2 * maxTokens
                                : proseMaxTokens;
  }
};

/// Reads every setting first (so a typo fails before anything loads), then
/// checks their ranges.
llvm::Expected<AccuracySettings> readAccuracySettings(const BenchArgs &args);

} // namespace spanc::bench

#endif // SPANC_BENCH_ACCURACY_ACCURACYSETTINGS_H
