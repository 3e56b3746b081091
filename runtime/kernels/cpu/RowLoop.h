//===- RowLoop.h - A loop over rows that enters OpenMP only when it pays --===//
//
// `#pragma omp parallel for if (rows > 1)` still calls into the OpenMP
// runtime when the condition is false (~0.2 us on a 2-core host), and
// inside an enclosing region (a decode step's layers run in one, see
// docs/ARCHITECTURE.md, "CPU GEMMs") it opens a nested region
// of one thread. A decode step runs hundreds of one-row kernels; this loop
// runs those on the calling thread without entering the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ROWLOOP_H
#define SPANC_RUNTIME_KERNELS_CPU_ROWLOOP_H

#include <omp.h>

#include <cstdint>

namespace spanc::cpu {

/// Runs body(row) for every row in [0, count): split statically between
/// the OpenMP threads when `parallel` and count > 1 and the caller is not
/// already inside a parallel region, else on the calling thread.
template <typename Body>
inline void forEachRow(int64_t count, bool parallel, Body &&body) {
  if (!parallel || count <= 1 || omp_in_parallel()) {
    for (int64_t row = 0; row < count; ++row)
      body(row);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < count; ++row)
    body(row);
}

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ROWLOOP_H
