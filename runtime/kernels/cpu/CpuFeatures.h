//===- CpuFeatures.h - Run-time detection of x86 vector extensions --------===//
//
// The binary is built for generic x86-64; kernels pick their AVX-512 / BF16
// / AMX paths at run time from this probe, so one build runs on any x86-64
// CPU. The probe can be capped at a lower instruction-set level (SPANC_ISA,
// or --isa on the commands that run a model), so that every kernel path a
// host has can be run and tested on it (docs/ARCHITECTURE.md, "Kernel
// paths").
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
#define SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spanc::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false; ///< half <-> float conversions (every AVX2 CPU)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amxTile = false;
  bool amxBf16 = false;
  /// The vendor is AMD ("AuthenticAMD"): not an instruction set (no cap
  /// changes it), but where the memory system wants other prefetches.
  bool amd = false;

  /// Whether bf16 GEMM runs natively (AVX-512-BF16 or AMX); otherwise bf16
  /// is emulated and f32 is the faster choice.
  bool hasNativeBf16() const { return avx512bf16 || amxBf16; }
  /// Whether the AVX-512 f32 kernels can run.
  bool hasAvx512() const { return avx512f && avx512bw && avx512vl; }
  /// A one-line summary, e.g. "avx2 avx512f avx512bf16 amx-bf16".
  std::string describe() const;
};

/// The instruction-set levels the kernels are written for, in order; each
/// includes the ones before it. A level is a kernel *path*: what every
/// kernel runs when the process is capped there.
///   Scalar      portable C++ kernels; spanc's f32 GEMM on SSE2 vectors
///   Avx2        spanc's f32 GEMM on AVX2+FMA (F32Gemm.h), AVX2
///               attention, int8 GEMV, RMSNorm, SwiGLU and K/V writes
///               (with F16C); RoPE and relocation run their portable path
///   Avx512      spanc's AVX-512 kernels (attention, int8 GEMV, RoPE,
///               elementwise, f16 K/V); oneDNN's f32 GEMMs
///   Avx512Bf16  + bf16 weight GEMMs through oneDNN (AVX-512-BF16)
///   Amx         + spanc's AMX GEMM and AMX attention tiles
enum class IsaLevel { Scalar, Avx2, Avx512, Avx512Bf16, Amx };

/// "scalar", "avx2", "avx512", "avx512bf16", "amx".
const char *isaLevelName(IsaLevel level);
/// The inverse of isaLevelName; nullopt for anything else.
std::optional<IsaLevel> parseIsaLevel(std::string_view name);
/// Every level, lowest first.
const std::vector<IsaLevel> &allIsaLevels();
/// "scalar, avx2, avx512, avx512bf16, amx" (for help and errors).
std::string isaLevelNames();

/// The highest level this CPU and OS support, whatever the cap.
IsaLevel hostIsaLevel();
/// The features of the CPU, uncapped.
const CpuFeatures &hostCpuFeatures();
/// What the host lacks for `level` ("avx512bf16", "amx-bf16 tiles (...)");
/// empty when it has it.
std::string missingForIsaLevel(IsaLevel level);

/// Caps the instruction set this process uses at `level` (below the host's
/// level; a cap above it changes nothing). Must come before the first
/// kernel runs: returns false, and changes nothing, when the features were
/// already probed under another cap. SPANC_ISA=LEVEL in the environment
/// sets the cap when nothing else has by the first probe.
bool setIsaCap(IsaLevel level);
/// The level the process runs at: min(cap, host).
IsaLevel isaLevel();

/// The features the kernels may use: the host's, less those above the
/// cap (probed once; an invalid SPANC_ISA stops the process with a message
/// naming the valid levels).
const CpuFeatures &cpuFeatures();

/// Whether this process may run AMX bf16 tiles: the cap allows them, the
/// CPU has them, the OS saves their state, and Linux granted the tile data
/// permission (asked once, on the first call). The AMX kernels also use
/// AVX-512 BF16.
bool amxBf16Usable();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
