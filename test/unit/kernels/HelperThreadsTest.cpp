//===- HelperThreadsTest.cpp - Shared items run exactly once --------------===//
//
// runSharedItems hands chunks of one batch to the caller and helpers: every
// item must run exactly once, for any size, chunk and thread count, over
// many consecutive batches (helpers of an old batch must never touch a new
// one), and the call must return only when all items are done.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/HelperThreads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace spanc::cpu;

struct Counts {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> ranges{0};
  explicit Counts(int64_t size) : hits(size_t(size)) {}
};

void count(void *context, int64_t begin, int64_t end) {
  auto &counts = *static_cast<Counts *>(context);
  EXPECT_LT(begin, end);
  for (int64_t item = begin; item < end; ++item)
    counts.hits[size_t(item)].fetch_add(1, std::memory_order_relaxed);
  counts.ranges.fetch_add(1, std::memory_order_relaxed);
}

TEST(HelperThreads, EveryItemRunsExactlyOnce) {
  for (int threads : {1, 2, 4})
    for (int64_t chunk : {1, 8, 64})
      for (int64_t size : {1, 7, 8, 9, 1000, 100003}) {
        Counts counts(size);
        runSharedItems(size, chunk, count, &counts, threads);
        for (int64_t item = 0; item < size; ++item)
          ASSERT_EQ(counts.hits[size_t(item)].load(), 1)
              << "item " << item << " of " << size << ", chunk " << chunk
              << ", " << threads << " threads";
        // One thread (or one chunk) runs the whole range in one call.
        if (threads > 1 && size > chunk) {
          EXPECT_EQ(counts.ranges.load(), int((size + chunk - 1) / chunk));
        } else {
          EXPECT_EQ(counts.ranges.load(), 1);
        }
      }
}

TEST(HelperThreads, ManyBatchesInARowStayApart) {
  // Short batches back to back: a helper that wakes for one batch while the
  // caller already runs the next must not run the new batch's items with
  // the old batch's context.
  for (int batch = 0; batch < 2000; ++batch) {
    const int64_t size = 16 + batch % 50;
    Counts counts(size);
    runSharedItems(size, 1, count, &counts, 3);
    for (int64_t item = 0; item < size; ++item)
      ASSERT_EQ(counts.hits[size_t(item)].load(), 1)
          << "batch " << batch << " item " << item;
  }
}

void slow(void *context, int64_t begin, int64_t end) {
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  count(context, begin, end);
}

TEST(HelperThreads, ReturnsOnlyWhenEveryItemIsDone) {
  Counts counts(64);
  runSharedItems(64, 4, slow, &counts, 2);
  for (int64_t item = 0; item < 64; ++item)
    ASSERT_EQ(counts.hits[size_t(item)].load(), 1) << item;
}

TEST(HelperThreads, ConcurrentCallersTakeTurns) {
  // Two executors relocating at once (e.g. two server sessions): each
  // caller's batch still runs every one of its own items exactly once.
  std::vector<std::unique_ptr<Counts>> counts;
  for (int caller = 0; caller < 3; ++caller)
    counts.push_back(std::make_unique<Counts>(5000 + caller));
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 3; ++caller)
    callers.emplace_back([&, caller] {
      for (int batch = 0; batch < 50; ++batch)
        runSharedItems(5000 + caller, 8, count, counts[size_t(caller)].get(),
                       2);
    });
  for (std::thread &thread : callers)
    thread.join();
  for (int caller = 0; caller < 3; ++caller)
    for (int64_t item = 0; item < 5000 + caller; ++item)
      ASSERT_EQ(counts[size_t(caller)]->hits[size_t(item)].load(), 50)
          << "caller " << caller << " item " << item;
}

} // namespace
