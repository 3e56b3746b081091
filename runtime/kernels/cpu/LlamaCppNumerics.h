//===- LlamaCppNumerics.h - RoPE and SwiGLU with llama.cpp's roundings ----===//
//
// The engine's llama.cpp numerics mode (ModelOptions::numerics) must
// reproduce llama.cpp's CPU forward pass bit for bit: at SmolLM2's size a
// single different rounding of one activation moves an int8 quantization
// step of the next projection, and a handful of those move greedy picks
// whose top-2 logits are 0.05 apart. These kernels follow ggml's x86
// (AVX-512) arithmetic, learned from its source and its compiled code:
//
//  - RoPE: the angle of pair i at position p is p * b^i with b =
//    powf(base, -2 / rotaryDim) applied as a running f32 product (theta *=
//    b), divided by the pair's frequency factor and multiplied by the
//    linear scale, then cosf/sinf. llama.cpp rotates Q and K in place
//    (its graph allocator reuses the projection's buffer), which takes
//    ggml's scalar loop, compiled with these fusions:
//      x0' = fma(x0, cos, -(x1 * sin)),  x1' = fma(x0, sin, x1 * cos).
//    (Its vectorized loop, for distinct buffers, fuses x1' the other way;
//    only the in-place form reproduces llama.cpp's greedy continuations.)
//  - SwiGLU: silu(g) * u with silu(g) = g / (1 + e^-g), e^x from the
//    vectorized exponential llama.cpp uses on AVX-512 (ARM's optimized-
//    routines expf: n = round(x / ln2) by the 1.5 * 2^23 shift, a two-part
//    ln2 reduction, a degree-5 polynomial, scalef), lanes past the last
//    multiple of 16 with libm's expf.
//
// Both are slower than the default kernels (Rope.h, Elementwise.h) and
// exist for reference runs only.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_LLAMACPPNUMERICS_H
#define SPANC_RUNTIME_KERNELS_CPU_LLAMACPPNUMERICS_H

#include "runtime/kernels/cpu/Elementwise.h"

#include <cstdint>

namespace spanc::cpu {

struct LlamaCppRopeShape {
  int64_t rows = 0;      ///< tokens
  int64_t numHeads = 0;  ///< heads per row, headDim floats each
  int64_t rowStride = 0; ///< floats between rows
  int headDim = 0;
  int rotaryDim = 0; ///< leading dimensions rotated (even)
  bool neox = false; ///< pairs (i, i + rotaryDim/2) instead of (2i, 2i+1)
  float base = 10000.0f;
  float linearScale = 1.0f;                ///< ggml's freq_scale
  const float *frequencyFactors = nullptr; ///< per pair, or null
};

/// Rotates every head of row r at `positions[r]` in place.
void ropeLlamaCpp(const LlamaCppRopeShape &shape, const int32_t *positions,
                  float *x);

/// out = silu(gate) * up as llama.cpp computes it (see the file comment).
void swiGluLlamaCpp(const RowShape &shape, const float *gate, const float *up,
                    float *out);

/// e^x for each of `count` values with llama.cpp's AVX-512 exponential
/// (for tests; needs AVX-512).
void expLlamaCpp(const float *x, float *out, int64_t count);

/// Whether this CPU runs these kernels (AVX-512).
bool hasLlamaCppNumerics();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_LLAMACPPNUMERICS_H
