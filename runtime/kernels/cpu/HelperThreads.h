//===- HelperThreads.h - Work sharing that never waits for a late thread --===//
//
// A relocation batch is a few milliseconds of independent (block, layer)
// items. Under an OpenMP parallel region every team thread must reach the
// region's closing barrier, so on a busy machine the caller waits for a
// thread the OS has not scheduled yet even when it has done all the work
// itself (2 threads then ran 5-20x slower than 1). Here the calling thread
// and helper threads claim chunks of items from one atomic counter; the
// caller returns as soon as every claimed chunk is finished. A helper that
// wakes late finds nothing left and goes back to sleep, so a batch never
// takes longer than the caller alone plus the chunk a helper holds.
//
// Helpers are created on first use (omp_get_max_threads() - 1 of them, so
// OMP_NUM_THREADS and omp_set_num_threads() bound them as they bound the
// OpenMP kernels) and sleep on a condition variable between batches: no
// spinning that would steal a core from other work.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_HELPERTHREADS_H
#define SPANC_RUNTIME_KERNELS_CPU_HELPERTHREADS_H

#include <cstdint>

namespace spanc::cpu {

/// Processes items [begin, end) of one batch; `context` is the caller's.
using ItemRangeFunction = void (*)(void *context, int64_t begin, int64_t end);

/// Runs `body` over [0, numItems) in chunks of `chunk` items, on the calling
/// thread and up to `maxThreads - 1` helpers (maxThreads <= 0: the OpenMP
/// thread limit). Every item is processed exactly once; returns when all
/// are done. Batches run one at a time per process: concurrent callers wait
/// for their turn (`body` must not call runSharedItems itself).
void runSharedItems(int64_t numItems, int64_t chunk, ItemRangeFunction body,
                    void *context, int maxThreads = 0);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_HELPERTHREADS_H
