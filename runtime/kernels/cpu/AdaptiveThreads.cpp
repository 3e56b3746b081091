//===- AdaptiveThreads.cpp - Fewer OpenMP threads while cores are taken ---===//

#include "runtime/kernels/cpu/AdaptiveThreads.h"

#include <omp.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace spanc::cpu {

namespace {

using namespace std::chrono_literals;

/// A window is at least this long and one step: long enough that a
/// thread sharing a core with a busy process (time slices of a few ms)
/// shows its wait, short enough to react within a few decode tokens.
constexpr auto kWindow = 30ms;
constexpr unsigned kMinStepsPerWindow = 1;
/// A thread that waited this share of the window for a CPU had none.
constexpr double kContendedShare = 0.2;
/// The pause before trying one thread more, doubled after each failed try.
constexpr auto kFirstProbePause = 500ms;
constexpr auto kMaxProbePause = 8s;

/// The calling thread's run-queue wait so far in ns (the second field of
/// schedstat), or -1.
int64_t readOwnWait() {
  int descriptor = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (descriptor < 0)
    return -1;
  char text[96];
  ssize_t length = ::read(descriptor, text, sizeof(text) - 1);
  ::close(descriptor);
  if (length <= 0)
    return -1;
  text[length] = '\0';
  unsigned long long running = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &running, &waiting) != 2)
    return -1;
  return int64_t(waiting);
}

} // namespace

AdaptiveThreads::AdaptiveThreads(int maxThreads, bool startAtMax)
    : limit(maxThreads > 0 ? maxThreads : omp_get_max_threads()),
      current(limit), probePause(kFirstProbePause) {
  // One thread has nothing to adapt; without schedstat nothing to go by.
  isEnabled = limit > 1 && readOwnWait() >= 0;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
      CPU_COUNT(&allowed) == int(sysconf(_SC_NPROCESSORS_ONLN)))
    machineCores = CPU_COUNT(&allowed);
  if (!isEnabled)
    return;
  // The first step cannot wait for a window to show the cores taken, and
  // on a taken core it is the slowest of all (a prefill of 37 tokens took
  // 3.9 s at 2 threads beside two busy processes, 40 ms alone): start with
  // the cores the runnable tasks leave free.
  // Before any parallel region only this thread of the team runs.
  if (int others = otherRunnableTasks(/*teamRunnable=*/1);
      !startAtMax && others >= 0 && machineCores > 0) {
    int free = std::max(1, machineCores - others);
    if (free < current) {
      current = free;
      omp_set_num_threads(current);
      nextProbe = Clock::now() + probePause;
    }
  }
  startWindow(Clock::now());
}

bool AdaptiveThreads::sampleTeam(std::vector<ThreadWait> &samples) const {
  samples.assign(size_t(current), ThreadWait{-1, 0});
  bool complete = true;
#pragma omp parallel num_threads(current) reduction(&& : complete)
  {
    int index = omp_get_thread_num();
    int64_t wait = readOwnWait();
    if (wait < 0 || index >= int(samples.size())) {
      complete = false;
    } else {
      samples[size_t(index)].threadId = int64_t(::syscall(SYS_gettid));
      samples[size_t(index)].waitNanoseconds = uint64_t(wait);
    }
  }
  return complete;
}

void AdaptiveThreads::startWindow(Clock::time_point now) {
  windowStart = now;
  stepsInWindow = 0;
  if (!sampleTeam(windowSamples))
    windowSamples.clear();
}

int AdaptiveThreads::decide(const std::vector<double> &waitShares,
                            Clock::time_point now, bool coreLooksFree) {
  current = std::clamp(nextThreads(waitShares, now, coreLooksFree), 1, limit);
  return current;
}

int AdaptiveThreads::otherRunnableTasks(int teamRunnable) const {
  int descriptor = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (descriptor < 0)
    return -1;
  char text[128];
  ssize_t length = ::read(descriptor, text, sizeof(text) - 1);
  ::close(descriptor);
  if (length <= 0)
    return -1;
  text[length] = '\0';
  double averages[3];
  int runnable = 0, total = 0;
  if (std::sscanf(text, "%lf %lf %lf %d/%d", &averages[0], &averages[1],
                  &averages[2], &runnable, &total) != 5)
    return -1;
  return std::max(0, runnable - teamRunnable);
}

bool AdaptiveThreads::coreLooksFree() const {
  if (machineCores <= 0)
    return true;
  // Read between steps: this thread runs and its team-mates may still
  // spin, so the team counts as `current` of the runnable tasks.
  int others = otherRunnableTasks(current);
  return others < 0 || others + current + 1 <= machineCores;
}

int AdaptiveThreads::nextThreads(const std::vector<double> &waitShares,
                                 Clock::time_point now, bool coreLooksFree) {
  int contended =
      int(std::count_if(waitShares.begin(), waitShares.end(),
                        [](double share) { return share >= kContendedShare; }));
  if (contended > 0) {
    if (probing) {
      // The extra thread found no free core: back off before trying again.
      ++numFailedProbes;
      probePause = std::min<Clock::duration>(probePause * 2, kMaxProbePause);
    } else if (current > 1) {
      ++numShrinks;
    }
    probing = false;
    nextProbe = now + probePause;
    return std::max(1, current - contended);
  }
  if (probing) {
    // The extra thread ran undisturbed: keep it, and try for another soon.
    probing = false;
    probePause = kFirstProbePause;
    nextProbe = now + probePause;
    return current;
  }
  // A core still taken would make the try a slow step: wait for one that
  // looks free (checked every window, it costs a read of /proc/loadavg).
  if (current < limit && now >= nextProbe && coreLooksFree) {
    probing = true;
    return current + 1;
  }
  return current;
}

void AdaptiveThreads::afterStep() {
  if (!isEnabled)
    return;
  ++stepsInWindow;
  Clock::time_point now = Clock::now();
  Clock::duration elapsed = now - windowStart;
  if (elapsed < kWindow || stepsInWindow < kMinStepsPerWindow)
    return;
  bool measured = !windowSamples.empty() && sampleTeam(endSamples);
  if (measured) {
    // Each thread against itself: a thread that joined the team since the
    // window began has no baseline and counts as undisturbed.
    shares.assign(endSamples.size(), 0.0);
    double window = double(
        std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
    for (size_t index = 0; index < endSamples.size(); ++index)
      for (const ThreadWait &start : windowSamples)
        if (start.threadId == endSamples[index].threadId &&
            endSamples[index].waitNanoseconds >= start.waitNanoseconds)
          shares[index] = double(endSamples[index].waitNanoseconds -
                                 start.waitNanoseconds) /
                          window;
    int before = current;
    bool wantsProbe = current < limit && now >= nextProbe;
    if (decide(shares, now, !wantsProbe || coreLooksFree()) != before)
      omp_set_num_threads(current);
  }
  startWindow(Clock::now());
}

} // namespace spanc::cpu
