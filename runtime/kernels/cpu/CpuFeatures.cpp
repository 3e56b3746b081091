//===- CpuFeatures.cpp - Run-time detection of x86 vector extensions ------===//

#include "runtime/kernels/cpu/CpuFeatures.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace spanc::cpu {

namespace {

/// Whether the OS saves the AVX-512 (opmask, ZMM) and AMX tile state, read
/// from XCR0; cpuid alone says only what the silicon has.
bool osSavesState(unsigned mask) {
  unsigned eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  if (!(ecx & (1u << 27))) // OSXSAVE
    return false;
  unsigned low, high;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (low & mask) == mask;
}

CpuFeatures probe() {
  CpuFeatures features;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
    return features;
  unsigned leaf7ebx = ebx, leaf7ecx = ecx, leaf7edx = edx;
  __cpuid(1, eax, ebx, ecx, edx);
  bool avxState = osSavesState(0x6);
  bool avx512State = osSavesState(0xe6);
  features.fma = avxState && (ecx & (1u << 12));
  features.avx2 = avxState && (leaf7ebx & (1u << 5));
  features.avx512f = avx512State && (leaf7ebx & (1u << 16));
  features.avx512bw = avx512State && (leaf7ebx & (1u << 30));
  features.avx512vl = avx512State && (leaf7ebx & (1u << 31));
  features.avx512vnni = avx512State && (leaf7ecx & (1u << 11));
  unsigned sub1eax = 0, sub1ebx, sub1ecx, sub1edx;
  if (__get_cpuid_count(7, 1, &sub1eax, &sub1ebx, &sub1ecx, &sub1edx))
    features.avx512bf16 = avx512State && (sub1eax & (1u << 5));
  // AMX needs XTILECFG and XTILEDATA (XCR0 bits 17 and 18) enabled; Linux
  // grants the data state per process on request, which oneDNN makes.
  bool amxState = osSavesState(0x60000);
  features.amxTile = amxState && (leaf7edx & (1u << 24));
  features.amxBf16 = features.amxTile && (leaf7edx & (1u << 22));
  return features;
}

} // namespace

std::string CpuFeatures::describe() const {
  std::string text;
  auto add = [&](bool present, const char *name) {
    if (!present)
      return;
    if (!text.empty())
      text += ' ';
    text += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(amxBf16, "amx-bf16");
  return text.empty() ? "baseline x86-64" : text;
}

const CpuFeatures &cpuFeatures() {
  static const CpuFeatures features = probe();
  return features;
}

bool amxBf16Usable() {
  // Linux (5.16+) hands out the 8 KiB tile data state per process on
  // request: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA.
  constexpr int kArchRequestPermission = 0x1023;
  constexpr int kTileDataFeature = 18;
  static const bool usable =
      cpuFeatures().amxBf16 && cpuFeatures().avx512bf16 &&
      cpuFeatures().hasAvx512() &&
      syscall(SYS_arch_prctl, kArchRequestPermission, kTileDataFeature) == 0;
  return usable;
}

} // namespace spanc::cpu
