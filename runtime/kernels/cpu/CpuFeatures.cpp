//===- CpuFeatures.cpp - Run-time detection of x86 vector extensions ------===//

#include "runtime/kernels/cpu/CpuFeatures.h"

#include <algorithm>
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13] = {}; // leaf 0 spells it in EBX, EDX, ECX
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    features.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  }
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
    return features;
  unsigned leaf7ebx = ebx, leaf7ecx = ecx, leaf7edx = edx;
  __cpuid(1, eax, ebx, ecx, edx);
  bool avxState = osSavesState(0x6);
  bool avx512State = osSavesState(0xe6);
  features.fma = avxState && (ecx & (1u << 12));
  features.f16c = avxState && (ecx & (1u << 29));
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

const CpuFeatures &probeOnce() {
  static const CpuFeatures features = probe();
  return features;
}

/// Whether Linux (5.16+) hands this process the 8 KiB AMX tile data state:
/// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, asked once.
bool hostAmxUsable() {
  constexpr int kArchRequestPermission = 0x1023;
  constexpr int kTileDataFeature = 18;
  static const bool usable =
      probeOnce().amxBf16 && probeOnce().avx512bf16 &&
      probeOnce().hasAvx512() &&
      syscall(SYS_arch_prctl, kArchRequestPermission, kTileDataFeature) == 0;
  return usable;
}

/// The host's features less those above `level`.
CpuFeatures capFeatures(CpuFeatures features, IsaLevel level) {
  if (level < IsaLevel::Amx)
    features.amxTile = features.amxBf16 = false;
  if (level < IsaLevel::Avx512Bf16)
    features.avx512bf16 = false;
  if (level < IsaLevel::Avx512)
    features.avx512f = features.avx512bw = features.avx512vl =
        features.avx512vnni = false;
  if (level < IsaLevel::Avx2)
    features.avx2 = features.fma = features.f16c = false;
  return features;
}

/// The cap: set by setIsaCap, else read from SPANC_ISA at the first probe.
/// `frozen` once cpuFeatures() has been computed under it.
struct CapState {
  std::mutex mutex;
  std::optional<IsaLevel> cap;
  bool frozen = false;
};
CapState &capState() {
  static CapState state;
  return state;
}

IsaLevel capFromEnvironment() {
  const char *text = std::getenv("SPANC_ISA");
  if (!text || !*text)
    return IsaLevel::Amx;
  if (std::optional<IsaLevel> level = parseIsaLevel(text))
    return *level;
  // Deep inside a kernel there is no caller to hand an error to; the
  // commands check SPANC_ISA up front (tools/spanc/IsaOption.cpp).
  std::fprintf(stderr,
               "spanc: error: SPANC_ISA=%s is not a kernel path; expected one "
               "of %s\n",
               text, isaLevelNames().c_str());
  std::exit(2);
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

const char *isaLevelName(IsaLevel level) {
  switch (level) {
  case IsaLevel::Scalar:
    return "scalar";
  case IsaLevel::Avx2:
    return "avx2";
  case IsaLevel::Avx512:
    return "avx512";
  case IsaLevel::Avx512Bf16:
    return "avx512bf16";
  case IsaLevel::Amx:
    return "amx";
  }
  return "?";
}

const std::vector<IsaLevel> &allIsaLevels() {
  static const std::vector<IsaLevel> levels = {
      IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512, IsaLevel::Avx512Bf16,
      IsaLevel::Amx};
  return levels;
}

std::optional<IsaLevel> parseIsaLevel(std::string_view name) {
  for (IsaLevel level : allIsaLevels())
    if (name == isaLevelName(level))
      return level;
  return std::nullopt;
}

std::string isaLevelNames() {
  std::string text;
  for (IsaLevel level : allIsaLevels())
    text += std::string(text.empty() ? "" : ", ") + isaLevelName(level);
  return text;
}

const CpuFeatures &hostCpuFeatures() { return probeOnce(); }

/// The highest kernel path `features` allow (AMX also needs the kernel's
/// permission, asked for the host once).
static IsaLevel levelOf(const CpuFeatures &features) {
  if (features.amxBf16 && hostAmxUsable())
    return IsaLevel::Amx;
  if (features.hasAvx512() && features.avx512bf16)
    return IsaLevel::Avx512Bf16;
  if (features.hasAvx512())
    return IsaLevel::Avx512;
  if (features.avx2 && features.fma)
    return IsaLevel::Avx2;
  return IsaLevel::Scalar;
}

IsaLevel hostIsaLevel() { return levelOf(probeOnce()); }

std::string missingForIsaLevel(IsaLevel level) {
  if (level <= hostIsaLevel())
    return "";
  const CpuFeatures &host = probeOnce();
  std::string missing;
  auto need = [&](bool present, const char *name) {
    if (!present)
      missing += std::string(missing.empty() ? "" : " ") + name;
  };
  need(host.avx2, "avx2");
  need(host.fma, "fma");
  if (level >= IsaLevel::Avx512) {
    need(host.avx512f, "avx512f");
    need(host.avx512bw, "avx512bw");
    need(host.avx512vl, "avx512vl");
  }
  if (level >= IsaLevel::Avx512Bf16)
    need(host.avx512bf16, "avx512bf16");
  if (level >= IsaLevel::Amx) {
    need(host.amxBf16, "amx-bf16");
    if (missing.empty())
      missing = "amx tile data permission (Linux 5.16+ and XCR0 bits 17-18)";
  }
  return missing;
}

bool setIsaCap(IsaLevel level) {
  CapState &state = capState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.frozen)
    return std::min(level, hostIsaLevel()) == isaLevel();
  state.cap = level;
  return true;
}

IsaLevel isaLevel() {
  // The level of the capped features (the cap itself may exceed the host).
  return levelOf(cpuFeatures());
}

const CpuFeatures &cpuFeatures() {
  static const CpuFeatures features = [] {
    CapState &state = capState();
    std::lock_guard<std::mutex> lock(state.mutex);
    const IsaLevel cap = state.cap ? *state.cap : capFromEnvironment();
    state.frozen = true;
    return capFeatures(probeOnce(), cap);
  }();
  return features;
}

bool amxBf16Usable() { return cpuFeatures().amxBf16 && hostAmxUsable(); }

} // namespace spanc::cpu
