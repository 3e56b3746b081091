//===- IsaTestMain.cpp - gtest main of the per-kernel-path tests ----------===//
//
// bazel/isa.bzl runs a test once per kernel path with SPANC_ISA set. On a
// CPU without that path the test passes without running anything and
// prints "spanc-isa: skipped LEVEL: this CPU lacks ..."; otherwise it checks
// that the cap took and prints "spanc-isa: ran LEVEL". tools/test.sh
// collects these lines into the list CI prints.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/CpuFeatures.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

using namespace spanc::cpu;

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  const char *requested = std::getenv("SPANC_ISA");
  if (!requested || !*requested) {
    std::printf("spanc-isa: ran %s (no cap: the host's level)\n",
                isaLevelName(isaLevel()));
    return RUN_ALL_TESTS();
  }
  std::optional<IsaLevel> level = parseIsaLevel(requested);
  if (!level) {
    std::fprintf(stderr, "SPANC_ISA=%s: expected one of %s\n", requested,
                 isaLevelNames().c_str());
    return 2;
  }
  if (*level > hostIsaLevel()) {
    std::printf("spanc-isa: skipped %s: this CPU lacks %s\n", requested,
                missingForIsaLevel(*level).c_str());
    return 0;
  }
  if (isaLevel() != *level) {
    std::fprintf(stderr, "SPANC_ISA=%s did not take: the kernels run at %s\n",
                 requested, isaLevelName(isaLevel()));
    return 1;
  }
  std::printf("spanc-isa: ran %s (%s)\n", requested,
              cpuFeatures().describe().c_str());
  return RUN_ALL_TESTS();
}
