//===- CpuFeatures.h - Run-time detection of x86 vector extensions --------===//
//
// The binary is built for generic x86-64; kernels pick their AVX-512 / BF16
// paths at run time from this probe, so one build runs on any x86-64 CPU.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
#define SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H

#include <string>

namespace spanc::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amxTile = false;
  bool amxBf16 = false;

  /// Whether bf16 GEMM runs natively (AVX-512-BF16 or AMX); otherwise bf16
  /// is emulated and f32 is the faster choice.
  bool hasNativeBf16() const { return avx512bf16 || amxBf16; }
  /// Whether the AVX-512 f32 kernels can run.
  bool hasAvx512() const { return avx512f && avx512bw && avx512vl; }
  /// A one-line summary, e.g. "avx2 avx512f avx512bf16 amx-bf16".
  std::string describe() const;
};

/// The features of the CPU this process runs on (probed once).
const CpuFeatures &cpuFeatures();

/// Whether this process may run AMX bf16 tiles: the CPU has them, the OS
/// saves their state, and Linux granted the tile data permission (asked
/// once, on the first call). The AMX kernels also use AVX-512 BF16.
bool amxBf16Usable();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
