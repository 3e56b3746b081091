//===- AttentionMath.h - The rules of paged attention, per row and key ----===//
//
// What the attention kernel computes for one tile row, as SPANC_HOST_DEVICE
// functions the kernel calls and a host test assembles into a reference
// over a page list (checked against cpu::pagedAttention): which query and
// head a tile row is, how far it may look (causal over logical indices),
// how many of a page's slots it sees, and the online softmax's update and
// the merge of split states. Everything in f32, as the CPU's scalar path.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONMATH_H
#define SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONMATH_H

#include "runtime/kernels/cuda/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace spanc::cuda {

/// Tile rows are (token, head in group) pairs, token-major, so the query
/// heads of one KV head sit together.
SPANC_HOST_DEVICE int64_t tileRowToken(int64_t tileRow, int groupSize) {
  return tileRow / groupSize;
}
SPANC_HOST_DEVICE int tileRowHead(int kvHead, int64_t tileRow, int groupSize) {
  return kvHead * groupSize + int(tileRow % groupSize);
}

/// The last logical key a query may see: the queries are the last
/// `numQueries` of `length` logical tokens.
SPANC_HOST_DEVICE int64_t queryLimit(int64_t length, int64_t numQueries,
                                     int64_t token) {
  return length - numQueries + token;
}

/// How many of a page's `valid` slots (logical indices logicalStart..) a
/// row with limit `limit` sees; 0 when none.
SPANC_HOST_DEVICE int visibleSlots(int valid, int64_t logicalStart,
                                   int64_t limit) {
  const int64_t count = limit - logicalStart + 1;
  if (count <= 0)
    return 0;
  return count < valid ? int(count) : valid;
}

/// The online softmax's step for a row whose running max is `oldMax`
/// (-inf before any key) meeting a block whose max is `blockMax`: the new
/// max, and the factor the running sum and accumulator are scaled by.
SPANC_HOST_DEVICE float softmaxNewMax(float oldMax, float blockMax) {
  return oldMax > blockMax ? oldMax : blockMax;
}
SPANC_HOST_DEVICE float softmaxCorrection(float oldMax, float newMax) {
  return expf(oldMax - newMax);
}

/// The weight of one score under the running max.
SPANC_HOST_DEVICE float softmaxWeight(float score, float max) {
  return expf(score - max);
}

/// The final scale of a row's accumulator (0 for a row that saw nothing).
SPANC_HOST_DEVICE float softmaxNormalizer(float sum) {
  return sum > 0 ? 1.0f / sum : 0.0f;
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONMATH_H
