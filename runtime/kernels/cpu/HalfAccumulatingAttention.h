//===- HalfAccumulatingAttention.h - Attention with llama.cpp's f16 numerics =//
//
// A second paged attention kernel, for the engine's llama.cpp numerics mode
// (ModelOptions::numerics): it follows the arithmetic of llama.cpp's CPU
// flash attention (ggml's flash_attn_ext, f16 K/V cache, the one-row path
// that prompts shorter than its 64-row tile and every decode step take)
// step by step, so that greedy continuations agree with llama.cpp token for
// token rather than only to within the noise of a different rounding:
//
//   - each query row is rounded to f16 before its dot products with the
//     (f16) keys; a dot product of 64 values sums in four 16-lane f32
//     accumulators combined as (a0 + a2) + (a1 + a3), then across lanes;
//   - keys are visited one at a time in logical order with an online
//     softmax whose value accumulator is held in f16: on a new maximum the
//     accumulator is scaled by expf(old - new) and rounded to f16; then
//     v * expf(s - max) is added with one fused multiply-add per element,
//     rounded to f16 again;
//   - the running sum is S = S * ms + vs (fused), and the output is the
//     f16 accumulator times 1/S in f32.
//
// The regular kernel (Attention.h) is tiled, splits long page lists over
// threads and accumulates in f32: faster and more accurate, but its
// roundings differ from llama.cpp's, and at this model size a few f16
// roundings per layer are enough to flip near-tied greedy picks. This one
// is for reference runs: one (token, head) row per task, no tiling.
//
// It reads the same PagedKvView (f32 or f16 elements; keys stored rotated,
// rope-in-kernel storage is not supported) and the same batch description.
//
// Scope of the match: llama.cpp takes this one-row path for batches of
// fewer than 64 query rows and caches of fewer than 512 cells; longer
// prompt batches go through its tiled kernel (f32 accumulation) and long
// single-token contexts through a split-KV path, which this kernel does not
// imitate. The greedy reference (prompts of 8-26 tokens, 32 decode steps)
// lies entirely inside that scope.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_HALFACCUMULATINGATTENTION_H
#define SPANC_RUNTIME_KERNELS_CPU_HALFACCUMULATINGATTENTION_H

#include "runtime/kernels/cpu/Attention.h"

namespace spanc::cpu {

/// output[row][head*headDim + d] = causal softmax(q k^T * scale) v for every
/// sequence of `batch`, with llama.cpp's flash-attention roundings (see the
/// file comment). `forceScalar` takes the portable path (tests: both paths
/// give the same bits).
void halfAccumulatingAttention(const PagedAttentionShape &shape,
                               const PagedAttentionBatch &batch,
                               const PagedKvView &kv, const float *queries,
                               float *output, bool forceScalar = false);

/// Whether this CPU runs the kernel (it needs AVX-512 with F16C).
bool hasHalfAccumulatingAttention();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_HALFACCUMULATINGATTENTION_H
