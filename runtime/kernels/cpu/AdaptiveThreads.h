//===- AdaptiveThreads.h - Fewer OpenMP threads while cores are taken -----===//
//
// The kernels split each op evenly over the OpenMP team, and the team meets
// at a barrier after it: a step goes at the pace of its slowest thread.
// When another process takes a core, the team thread sharing it runs about
// half the time, every barrier waits for it while its team-mates spin, and
// the step is slower than with one thread fewer (issue #15: 2 threads
// decoded 38 tok/s beside a busy loop, 1 thread 93).
//
// AdaptiveThreads watches how long each team thread waited for a CPU (the
// kernel's per-thread run-queue delay, /proc/thread-self/schedstat) over
// windows of steps. A thread that waited a fifth of the window or more
// means a taken core: the team shrinks by that many threads. Later it tries
// one thread more for a window and keeps it only if no thread waited, with
// a growing pause between failed tries, so a machine that quiets down gets
// its threads back. A try costs a slow step where the core is still taken,
// so it is made only when the machine's runnable tasks (/proc/loadavg)
// leave a core free, where that count covers the cores spanc may use; the
// same count sets the threads of the first step. It never goes above the
// count it started with (--threads).
// Spinning at barriers stays as it is: on a quiet machine it is what makes
// a decode step fast.
//
// Where schedstat is missing (not Linux, or a kernel without it) it does
// nothing.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ADAPTIVETHREADS_H
#define SPANC_RUNTIME_KERNELS_CPU_ADAPTIVETHREADS_H

#include <chrono>
#include <cstdint>
#include <vector>

namespace spanc::cpu {

class AdaptiveThreads {
public:
  /// Adapts the OpenMP thread count of the calling thread's parallel
  /// regions (omp_set_num_threads) between 1 and `maxThreads` (0: the
  /// current omp_get_max_threads()), starting from the cores the machine's
  /// runnable tasks leave free unless `startAtMax`.
  explicit AdaptiveThreads(int maxThreads = 0, bool startAtMax = false);

  /// Call after every forward step (or prefill chunk), on the thread that
  /// starts the parallel regions; cheap except at the end of a window.
  void afterStep();

  bool enabled() const { return isEnabled; }
  /// The thread count the next step runs with.
  int threads() const { return current; }
  int maxThreads() const { return limit; }
  /// How often the team shrank, and how many tries to grow it failed.
  unsigned shrinks() const { return numShrinks; }
  unsigned failedProbes() const { return numFailedProbes; }

  /// A team thread's run-queue wait in a window, as a share of the window.
  struct ThreadWait {
    int64_t threadId = 0;
    uint64_t waitNanoseconds = 0;
  };

  /// The policy, apart from measuring (tests drive it with made-up waits):
  /// given each team thread's wait share over the window that ends at
  /// `now` and whether a core looks free for one thread more, the thread
  /// count for the next window (threads() after this).
  int decide(const std::vector<double> &waitShares,
             std::chrono::steady_clock::time_point now,
             bool coreLooksFree = true);

private:
  using Clock = std::chrono::steady_clock;

  /// Each team thread's id and run-queue wait so far, read by the thread
  /// itself in a parallel region of `current` threads.
  bool sampleTeam(std::vector<ThreadWait> &samples) const;
  void startWindow(Clock::time_point now);
  int nextThreads(const std::vector<double> &waitShares, Clock::time_point now,
                  bool coreLooksFree);
  /// Whether /proc/loadavg's runnable tasks leave a core free for one
  /// team thread more; true where that cannot be told.
  bool coreLooksFree() const;
  /// The runnable tasks that are not this team (`teamRunnable` of them
  /// are), or -1.
  int otherRunnableTasks(int teamRunnable) const;

  bool isEnabled = false;
  /// The machine's cores, when spanc may use them all (else 0: the
  /// system-wide runnable count says nothing about spanc's cores).
  int machineCores = 0;
  int limit = 1;
  int current = 1;
  bool probing = false;
  Clock::duration probePause;
  Clock::time_point nextProbe;
  Clock::time_point windowStart;
  unsigned stepsInWindow = 0;
  std::vector<ThreadWait> windowSamples, endSamples;
  std::vector<double> shares;
  unsigned numShrinks = 0, numFailedProbes = 0;
};

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ADAPTIVETHREADS_H
