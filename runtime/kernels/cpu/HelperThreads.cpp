//===- HelperThreads.cpp - Work sharing that never waits for a late thread ===//

#include "runtime/kernels/cpu/HelperThreads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace spanc::cpu {

namespace {

/// The batch being processed. `claim` packs the batch's generation (high
/// 32 bits) and the next unclaimed item (low 32 bits) so that a helper still
/// holding an old generation can never claim items of a newer batch.
class Pool {
public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread &thread : threads)
      thread.join();
  }

  void run(int64_t numItems, int64_t chunk, ItemRangeFunction body,
           void *context, int maxThreads) {
    // One batch at a time: concurrent callers (several executors in one
    // process) take turns; the pool's state describes a single batch.
    std::lock_guard<std::mutex> turn(batchMutex);
    const int helpers = std::max(0, maxThreads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex);
      while (int(threads.size()) < helpers)
        threads.emplace_back([this] { helperLoop(); });
      ++generation;
      job = Job{numItems, chunk, body, context, helpers};
      finished.store(0, std::memory_order_relaxed);
      claim.store(uint64_t(generation) << 32, std::memory_order_release);
    }
    if (helpers > 0)
      wake.notify_all();
    work(generation, job);
    // Only chunks a helper already claimed can be outstanding.
    while (finished.load(std::memory_order_acquire) < numItems)
      std::this_thread::yield();
  }

private:
  struct Job {
    int64_t numItems = 0, chunk = 1;
    ItemRangeFunction body = nullptr;
    void *context = nullptr;
    int helpers = 0;
  };

  /// Claims and runs chunks of generation `myGeneration` until none is
  /// left (or a newer batch started).
  void work(uint32_t myGeneration, const Job &myJob) {
    uint64_t current = claim.load(std::memory_order_acquire);
    for (;;) {
      if (uint32_t(current >> 32) != myGeneration)
        return;
      const int64_t begin = int64_t(current & 0xffffffffu);
      if (begin >= myJob.numItems)
        return;
      const int64_t end = std::min(myJob.numItems, begin + myJob.chunk);
      if (!claim.compare_exchange_weak(
              current, (uint64_t(myGeneration) << 32) | uint64_t(end),
              std::memory_order_acq_rel))
        continue; // `current` reloaded
      myJob.body(myJob.context, begin, end);
      finished.fetch_add(end - begin, std::memory_order_release);
      current = claim.load(std::memory_order_acquire);
    }
  }

  void helperLoop() {
    uint32_t seen = 0;
    int index;
    {
      std::lock_guard<std::mutex> lock(mutex);
      index = numStarted++;
    }
    for (;;) {
      Job myJob;
      uint32_t myGeneration;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping)
          return;
        seen = myGeneration = generation;
        myJob = job;
      }
      // Helpers beyond this batch's thread limit sit it out.
      if (index < myJob.helpers)
        work(myGeneration, myJob);
    }
  }

  std::mutex batchMutex;
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<std::thread> threads;
  int numStarted = 0;
  bool stopping = false;
  uint32_t generation = 0;
  Job job;
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> finished{0};
};

Pool &pool() {
  static Pool instance;
  return instance;
}

} // namespace

void runSharedItems(int64_t numItems, int64_t chunk, ItemRangeFunction body,
                    void *context, int maxThreads) {
  if (numItems <= 0)
    return;
  if (maxThreads <= 0)
    maxThreads = omp_get_max_threads();
  chunk = std::max<int64_t>(1, chunk);
  if (maxThreads <= 1 || numItems <= chunk) {
    body(context, 0, numItems);
    return;
  }
  pool().run(numItems, chunk, body, context, maxThreads);
}

} // namespace spanc::cpu
