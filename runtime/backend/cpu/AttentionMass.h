//===- AttentionMass.h - How much attention each key receives -------------===//
//
// A question-guided span repair (docs/ARCHITECTURE.md, "Span attention")
// runs the question once over the stitched cache and ranks the span blocks
// by the attention they receive from it. This computes that measure for
// one sequence at one layer: the softmax probabilities of its query rows
// over the keys of its page list (causal, as the attention kernel reads
// them), summed over rows and query heads, added per key. It reads the
// same paged K the kernel reads, for the few rows of a probe, on every
// guided hit: its loops run a page of keys against all rows at once,
// vectorized over rows, in the same arithmetic order as a key-at-a-time
// loop (AttentionMassTest checks it bit for bit).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPU_ATTENTIONMASS_H
#define SPANC_RUNTIME_BACKEND_CPU_ATTENTIONMASS_H

#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/Rope.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <vector>

namespace spanc::backend {

struct KeyMassShape {
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headDim = 0;
  float scale = 0;            ///< the attention's score scale
  int64_t queryRowStride = 0; ///< floats between query rows
};

/// Adds to keyMass[j], for each logical key j of the page list (blockIds,
/// validTokens), the probability each of the `numQueries` query rows (the
/// page list's last numQueries logical tokens, already rotated; row r sees
/// keys up to its own) gives it, summed over rows and query heads. With
/// `keyRope` K is stored unrotated and rotated at its logical index, as
/// the attention kernel does. `scores` and `transposed` are scratch reused
/// across calls.
void accumulateKeyMass(const KeyMassShape &shape, const float *queries,
                       int64_t numQueries, llvm::ArrayRef<int32_t> blockIds,
                       llvm::ArrayRef<int32_t> validTokens,
                       const cpu::PagedKvView &kv,
                       const cpu::RopeTable *keyRope, float *keyMass,
                       std::vector<float> &scores,
                       std::vector<float> &transposed);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPU_ATTENTIONMASS_H
