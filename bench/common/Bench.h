//===- Bench.h - The benchmarks behind `spanc bench NAME` -----------------===//
//
// Each benchmark is a library under bench/<name>/ that registers itself
// (BenchRegistration, linked with alwayslink) and writes its results as
// bench/results/<name>.md (a table: setup, machine, model, repetitions,
// median and spread), <name>.tsv (the raw rows) and <name>.png (a plot).
// `spanc bench NAME` parses the common options below and calls it;
// bench/run_all.sh runs every registered benchmark.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_BENCH_H
#define SPANC_BENCH_COMMON_BENCH_H

#include "runtime/backend/Device.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>

namespace spanc::bench {

/// What `spanc bench NAME` passes to a benchmark.
struct BenchArgs {
  std::string name;
  /// GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf).
  std::string modelPath;
  /// Where NAME.md, NAME.tsv and NAME.png go (default: bench/results).
  std::string resultsDir;
  /// The repository root (for bench/<name>/ scripts and data).
  std::string repoRoot;
  /// A small size for a smoke test (CI): seconds, not minutes.
  bool quick = false;
  /// Repetitions per point; 0 = the benchmark's default.
  int repetitions = 0;
  /// OpenMP threads (already applied); 0 = all cores.
  int threads = 0;
  uint64_t seed = 1;
  /// Where the model runs (--device): executors of a ModelSession loaded
  /// with it run on that backend.
  backend::Device device = backend::Device::Cpu;
  /// How prompt rows multiply 4/8-bit weights (--gemm-weights,
  /// --prompt-int8): model::ModelOptions::gemmWeightCopy and
  /// quantizedPrompt, which ModelSession::load applies.
  bool gemmWeightCopy = false;
  bool quantizedPrompt = true;
  /// Benchmark-specific settings from `--set KEY=VALUE`.
  std::map<std::string, std::string> settings;

  /// A setting, or `fallback` when absent.
  std::string setting(llvm::StringRef key, llvm::StringRef fallback) const;
  /// An integer setting; an error names the key when the value is not one.
  llvm::Expected<int64_t> intSetting(llvm::StringRef key,
                                     int64_t fallback) const;
  /// A comma-separated list of integers ("1,2,4,8").
  llvm::Expected<std::vector<int64_t>>
  intListSetting(llvm::StringRef key, llvm::ArrayRef<int64_t> fallback) const;
  /// `repetitions` if set, else `quick ? quickDefault : fullDefault`.
  int repetitionsOr(int fullDefault, int quickDefault) const;
};

using BenchFunction = llvm::Error (*)(const BenchArgs &);

struct BenchInfo {
  std::string name;
  /// One line for `spanc bench --list` and --help.
  std::string summary;
  /// The settings it understands, one "KEY=DEFAULT: meaning" per line.
  std::string settingsHelp;
  BenchFunction run = nullptr;
};

/// Registers a benchmark at static-initialization time:
///   static bench::BenchRegistration registration{{"rag", "...", "...", run}};
struct BenchRegistration {
  explicit BenchRegistration(BenchInfo info);
};

/// Every registered benchmark, by name.
const std::map<std::string, BenchInfo> &registeredBenchmarks();

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_BENCH_H
