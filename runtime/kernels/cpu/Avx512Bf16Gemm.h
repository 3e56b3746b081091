//===- Avx512Bf16Gemm.h - bf16 weight GEMMs on AVX-512 BF16 ---------------===//
//
// The GEMM of CPUs with AVX512_BF16 and no AMX (AMD Zen 4 and later, Intel
// Cooper Lake, a Sapphire Rapids guest without AMX state): the same panels
// as the AMX kernel (AmxGemm.h), owned or borrowed from the 4/8-bit tiles
// that decode reads, multiplied by VDPBF16PS. Each panel row is one
// 512-bit register of 16 columns' K pairs, exactly VDPBF16PS's operand, so
// the panels need no other layout.
//
// Why not oneDNN here: its matmul needs its own bf16 copy of every
// projection, 2 bytes a weight beside the 4/8-bit copy decode reads
// (SmolLM2: ~210 MB; `spanc bench engine` peak RSS 431 MiB against
// llama.cpp's 147 on a Zen 4 host). Borrowed panels keep none.
//
// Kernel. A block of up to 12 rows times one panel (32 columns) holds its
// 24 accumulators in registers over the whole K loop; each K pair loads
// the panel's two registers once and broadcasts each row's bf16 pair
// (docs/ARCHITECTURE.md, "CPU GEMMs").
//
// Threads. The threads split the panels (contiguous runs), each unpacking
// its own panels once and multiplying every row by them: at 64 FLOPs a
// cycle the activations are read from L2 far slower than it serves them,
// so unlike the AMX kernel no row split is needed to keep them close.
//
// Numerics. Every output sums its K pairs in one fixed order, whatever M is
// and wherever the row sits: a row's result never depends on the other
// rows (the span cache's hit = miss contract).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_AVX512BF16GEMM_H
#define SPANC_RUNTIME_KERNELS_CPU_AVX512BF16GEMM_H

#include "runtime/kernels/cpu/AmxGemm.h"

#include <cstdint>

namespace spanc::cpu {

/// y[M][N] = x[M][K] * W^T (or the epilogue's function of it) for weights
/// packed or borrowed as for amxGemm; x has K floats per row, y N floats
/// per row (N/2 for SwiGlu). Runs on the OpenMP threads of the caller.
/// Requires avx512bf16.
void avx512Bf16Gemm(const AmxWeights &weights, const float *x, int64_t m,
                    float *y, AmxScratch &scratch,
                    AmxEpilogue epilogue = AmxEpilogue::Store);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_AVX512BF16GEMM_H
