//===- CpuFeaturesTest.cpp - The run-time CPU probe -----------------------===//

#include "runtime/kernels/cpu/CpuFeatures.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

using namespace spanc::cpu;

namespace {

/// /proc/cpuinfo's first vendor_id ("AuthenticAMD", "GenuineIntel"), or
/// empty where there is none.
std::string kernelsVendor() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("vendor_id", 0) != 0)
      continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos)
      return "";
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

// The vendor picks the GEMV's prefetch level (QuantGemv.cpp): cpuid's
// answer must be the kernel's.
TEST(CpuFeaturesTest, VendorMatchesTheKernel) {
  const std::string vendor = kernelsVendor();
  if (vendor.empty())
    GTEST_SKIP() << "no vendor_id in /proc/cpuinfo";
  EXPECT_EQ(hostCpuFeatures().amd, vendor == "AuthenticAMD") << vendor;
  // No instruction-set cap hides the vendor.
  EXPECT_EQ(cpuFeatures().amd, hostCpuFeatures().amd);
}

TEST(CpuFeaturesTest, LevelNamesRoundTrip) {
  for (IsaLevel level : allIsaLevels())
    EXPECT_EQ(parseIsaLevel(isaLevelName(level)), level);
  EXPECT_FALSE(parseIsaLevel("avx1024").has_value());
}

} // namespace
