//===- PhaseProfile.h - Where a run's scheduler steps spent their time ----===//
//
// Wall time per phase of the executor's loop, summed over the steps since
// the last reset (Executor::profile; `spanc run --stats=detailed`, the hit
// breakdown of `spanc bench rag`, bench/results/hit-profile.md): the
// cache manager's layout (positions, block hashes, page lists) and lookup
// (hash lookups, hits settled, allocation, compute runs), the rest of
// admission, CIDRA, building the batch, relocations, repairs, the forward
// pass by op (attention, the GEMMs, the other layer ops, the output
// head), sampling and the scheduler's update. Each phase is timed with
// steady_clock on the executor's thread around code that runs once per
// step, never inside a per-token loop.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_SCHED_PHASEPROFILE_H
#define SPANC_RUNTIME_SCHED_PHASEPROFILE_H

#include "runtime/backend/ForwardProfile.h"
#include "runtime/model/ModelConfig.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdint>

namespace spanc::sched {

struct PhaseProfile {
  /// Scheduler steps run, and the forward sequences they held.
  uint64_t steps = 0, sequences = 0;
  /// The cache manager (kv::CacheProfile): layouts and their time, then
  /// the rest of admission (lookups, settling hits, allocation, runs).
  uint64_t layouts = 0, admissions = 0;
  double layoutSeconds = 0, lookupSeconds = 0;
  /// schedule(): admission besides the cache manager (the fair queue,
  /// resolving prompts, room checks); CIDRA's step plan; the batch
  /// (tokens, positions, page lists).
  double admissionSeconds = 0, relocationPlanSeconds = 0, batchSeconds = 0;
  /// The runner: block copies and relocations; repairs (blend, guided:
  /// their own passes); the forward sequences; the forward pass (wall);
  /// sampling, stop checks and streaming.
  double relocateSeconds = 0, repairSeconds = 0, prepareSeconds = 0,
         forwardSeconds = 0, sampleSeconds = 0;
  /// The scheduler's update: commits, appends, finished calls.
  double updateSeconds = 0;
  /// schedule() to update(), every step.
  double stepSeconds = 0;
  /// Inside forwardSeconds (and the repairs' passes), by op, when the
  /// executor profiles (ExecutorOptions::profile).
  backend::ForwardProfile forward;

  PhaseProfile &operator+=(const PhaseProfile &other);
};

/// Adds the time since `mark` to `seconds` and moves `mark` to now.
inline void lap(std::chrono::steady_clock::time_point &mark, double &seconds) {
  const auto now = std::chrono::steady_clock::now();
  seconds += std::chrono::duration<double>(now - mark).count();
  mark = now;
}

/// The profile as a table of phases in ms (and per layer for the forward
/// pass's ops), each line's share of the steps' time; `compileSeconds`,
/// when positive, is printed first (compiling and planning happen before
/// a run, outside its steps). With the model's `config`, attention and
/// the GEMMs also show their FLOP rates.
void printPhaseProfile(llvm::raw_ostream &os, const PhaseProfile &profile,
                       double compileSeconds = 0,
                       const model::ModelConfig *config = nullptr);

} // namespace spanc::sched

#endif // SPANC_RUNTIME_SCHED_PHASEPROFILE_H
