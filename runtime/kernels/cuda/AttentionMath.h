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

/// Merging a range's state (max, sum, accumulator; sum 0: the row saw
/// nothing there, skip it) into a row's running state: the new max and
/// the factors the running and the range values are scaled by. Ranges are
/// merged in page order, the same way whether they ran in one thread block
/// or in several, so a row's bits do not depend on that choice.
SPANC_HOST_DEVICE void mergeFactors(float runningMax, float rangeMax,
                                    float &newMax, float &keep, float &add) {
  newMax = runningMax > rangeMax ? runningMax : rangeMax;
  keep = expf(runningMax - newMax);
  add = expf(rangeMax - newMax);
}

/// running * keep + range * add, each step rounded on its own.
SPANC_HOST_DEVICE float mergeValue(float running, float keep, float range,
                                   float add) {
  return addRounded(mulRounded(running, keep), mulRounded(range, add));
}

/// A row's output: its merged accumulator over its merged sum (0 for a row
/// that saw nothing).
SPANC_HOST_DEVICE float attentionOutput(float accumulator, float sum) {
  return sum > 0 ? divideRounded(accumulator, sum) : 0.0f;
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ATTENTIONMATH_H
