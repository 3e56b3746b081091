//===- IsaPath.h - Which kernel path a per-path test runs on ----*- C++ -*-===//
//
// Per-path tests (bazel/isa.bzl) check on every kernel path what depends on
// the arithmetic; what does not (scheduling, block accounting) they check
// on the host's own path only, where the plain run checks it too.
//
//===----------------------------------------------------------------------===//

#ifndef SPANC_TEST_ISA_ISAPATH_H
#define SPANC_TEST_ISA_ISAPATH_H

#include "runtime/kernels/cpu/CpuFeatures.h"

namespace spanc::test {

/// Whether the kernels run at the host's own level (no cap, or a cap at it).
inline bool onHostKernelPath() {
  return cpu::isaLevel() == cpu::hostIsaLevel();
}

} // namespace spanc::test

/// Ends a test that does not depend on the kernel path when a cap put the
/// kernels below the host's level.
#define SKIP_OFF_HOST_KERNEL_PATH()                                            \
  if (!::spanc::test::onHostKernelPath())                                      \
  GTEST_SKIP() << "independent of the kernel path: checked on the host's "     \
                  "own path"

#endif // SPANC_TEST_ISA_ISAPATH_H
