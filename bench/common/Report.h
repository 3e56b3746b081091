//===- Report.h - Statistics, machine facts and result files for benchmarks
//===//
//
// What every bench/results/<name>.md needs besides its own table: a summary
// of samples (median and spread), the machine and its load while the
// benchmark ran, and the plot. Plots are drawn by a Python script next to
// the benchmark (matplotlib from Debian's python3-matplotlib); when that is
// missing the .md and .tsv are still written and the caller is told.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_REPORT_H
#define SPANC_BENCH_COMMON_REPORT_H

#include "bench/common/Bench.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace spanc::bench {

/// Median and spread of a set of samples.
struct Summary {
  size_t count = 0;
  double median = 0, mean = 0, stdev = 0, min = 0, max = 0;
  double p90 = 0, p99 = 0;
};

Summary summarize(llvm::ArrayRef<double> samples);
/// The q-quantile (0..1) by linear interpolation; 0 for no samples.
double quantile(llvm::ArrayRef<double> samples, double q);

/// "12.3 [10.1, 15.0]": median [min, max] with `decimals` digits.
std::string formatSpread(const Summary &summary, int decimals = 1);

/// The CPU model, core count and the instruction-set features that matter
/// here (AVX-512, VNNI, BF16, AMX), from /proc/cpuinfo.
std::string describeMachine();

/// 1-minute load average now, from /proc/loadavg.
double loadAverageNow();

/// Samples the 1-minute load average every few seconds on a thread while
/// alive; the report gives min/median/max, so a reader can judge the noise.
class LoadSampler {
public:
  LoadSampler();
  ~LoadSampler();
  LoadSampler(const LoadSampler &) = delete;
  LoadSampler &operator=(const LoadSampler &) = delete;
  /// Stops sampling; "load average 1.2 [0.9, 3.4] over 57 samples".
  std::string stopAndDescribe();

private:
  void finish();
  std::vector<double> samples;
  std::atomic<bool> stop{false};
  std::thread thread;
};

/// Writes `text` to `path` (creating its folder), replacing it atomically.
llvm::Error writeTextFile(llvm::StringRef path, llvm::StringRef text);

/// Runs `python3 <script> <args...>` (Debian's /usr/bin/python3 first, for
/// its matplotlib). Fails with the script's exit status and stderr.
llvm::Error runPlotScript(llvm::StringRef script,
                          llvm::ArrayRef<std::string> args);

/// <resultsDir>/<name><extension>: resultPath(args, ".tsv").
std::string resultPath(const BenchArgs &args, llvm::StringRef extension);

/// How every benchmark ends: draws <name>.png from <name>.tsv (which the
/// benchmark wrote) with bench/<name>/plot.py — when it cannot, it says why
/// on stderr and in the .md — then writes <name>.md and prints it.
llvm::Error finishResults(const BenchArgs &args, std::string markdown);

/// Today's date and time, "2026-11-29 17:40".
std::string timestampNow();

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_REPORT_H
