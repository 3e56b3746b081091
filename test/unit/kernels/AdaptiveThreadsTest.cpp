//===- AdaptiveThreadsTest.cpp - The thread-count policy under contention -===//
//
// The policy alone, fed made-up run-queue waits at made-up times (nothing
// here depends on how fast the machine is or on what else runs on it),
// and the measurement's one property that holds anywhere: on a thread that
// is not starved, a window's wait share is small.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AdaptiveThreads.h"

#include "gtest/gtest.h"

#include <omp.h>

using namespace spanc::cpu;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<double> kQuiet4 = {0.0, 0.01, 0.0, 0.02};

} // namespace

TEST(AdaptiveThreads, ShrinksByTheThreadsThatWaitedForACore) {
  AdaptiveThreads threads(4, /*startAtMax=*/true);
  Clock::time_point now = Clock::now();
  EXPECT_EQ(threads.decide(kQuiet4, now), 4);
  // Two threads waited a fifth of the window or more.
  EXPECT_EQ(threads.decide({0.0, 0.5, 0.2, 0.1}, now + 30ms), 2);
  EXPECT_EQ(threads.threads(), 2);
  EXPECT_EQ(threads.shrinks(), 1u);
  // Never below one.
  EXPECT_EQ(threads.decide({0.6, 0.6}, now + 60ms), 1);
  EXPECT_EQ(threads.decide({0.9}, now + 90ms), 1);
}

TEST(AdaptiveThreads, TriesOneMoreAfterAPauseAndKeepsItWhenNoneWaited) {
  AdaptiveThreads threads(3, /*startAtMax=*/true);
  Clock::time_point now = Clock::now();
  EXPECT_EQ(threads.decide({0.5, 0.5, 0.0}, now), 1);
  // Quiet, but too soon to try again.
  EXPECT_EQ(threads.decide({0.0}, now + 100ms), 1);
  // After the pause: one more, for a window.
  EXPECT_EQ(threads.decide({0.0}, now + 600ms), 2);
  // It ran undisturbed: kept; and the next try comes after the short pause.
  EXPECT_EQ(threads.decide({0.0, 0.0}, now + 630ms), 2);
  EXPECT_EQ(threads.decide({0.0, 0.0}, now + 700ms), 2);
  EXPECT_EQ(threads.decide({0.0, 0.0}, now + 1200ms), 3);
  EXPECT_EQ(threads.decide({0.0, 0.0, 0.0}, now + 1230ms), 3);
  // Never above the limit it started with.
  EXPECT_EQ(threads.decide({0.0, 0.0, 0.0}, now + 60s), 3);
  EXPECT_EQ(threads.failedProbes(), 0u);
}

TEST(AdaptiveThreads, BacksOffWhileTheExtraThreadKeepsFindingNoCore) {
  AdaptiveThreads threads(2, /*startAtMax=*/true);
  Clock::time_point now = Clock::now();
  EXPECT_EQ(threads.decide({0.0, 0.4}, now), 1);
  // Each failed try doubles the pause: 0.5 s, 1 s, 2 s, 4 s, 8 s, 8 s.
  Clock::time_point at = now;
  for (auto pause : {500ms, 1000ms, 2000ms, 4000ms, 8000ms, 8000ms}) {
    EXPECT_EQ(threads.decide({0.0}, at + pause - 10ms), 1);
    at += pause;
    EXPECT_EQ(threads.decide({0.0}, at), 2) << "try after " << pause.count();
    at += 30ms;
    EXPECT_EQ(threads.decide({0.0, 0.5}, at), 1);
  }
  EXPECT_EQ(threads.failedProbes(), 6u);
  EXPECT_EQ(threads.shrinks(), 1u);
  // A try that succeeds resets the pause.
  at += 8000ms;
  EXPECT_EQ(threads.decide({0.0}, at), 2);
  EXPECT_EQ(threads.decide({0.0, 0.0}, at + 30ms), 2);
  EXPECT_EQ(threads.decide({0.0, 0.3}, at + 60ms), 1);
  EXPECT_EQ(threads.decide({0.0}, at + 60ms + 510ms), 2);
}

TEST(AdaptiveThreads, OneThreadHasNothingToAdapt) {
  AdaptiveThreads threads(1);
  EXPECT_FALSE(threads.enabled());
  threads.afterStep();
  EXPECT_EQ(threads.threads(), 1);
}

TEST(AdaptiveThreads, MeasuringAWindowKeepsTheCountWithinItsBounds) {
  // The real measurement (a parallel region reading each thread's
  // schedstat): whatever the machine's load, the count it picks stays in
  // [1, the limit].
  if (omp_get_num_procs() < 2)
    GTEST_SKIP() << "needs 2 cores";
  AdaptiveThreads threads(1 + (omp_get_num_procs() > 2));
  if (!threads.enabled())
    GTEST_SKIP() << "no /proc/thread-self/schedstat";
  threads.afterStep();
  EXPECT_GE(threads.threads(), 1);
  EXPECT_LE(threads.threads(), threads.maxThreads());
}

TEST(AdaptiveThreads, TriesOneMoreOnlyWhenACoreLooksFree) {
  AdaptiveThreads threads(2, /*startAtMax=*/true);
  Clock::time_point now = Clock::now();
  EXPECT_EQ(threads.decide({0.0, 0.5}, now), 1);
  // Past the pause, but every core is busy: no try, and no failure counted.
  EXPECT_EQ(threads.decide({0.0}, now + 600ms, /*coreLooksFree=*/false), 1);
  EXPECT_EQ(threads.decide({0.0}, now + 10s, /*coreLooksFree=*/false), 1);
  EXPECT_EQ(threads.failedProbes(), 0u);
  // A core frees up: the next window tries.
  EXPECT_EQ(threads.decide({0.0}, now + 10s + 30ms, /*coreLooksFree=*/true), 2);
}
