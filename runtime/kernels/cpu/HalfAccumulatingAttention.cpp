//===- HalfAccumulatingAttention.cpp - Attention with llama.cpp's f16 numerics//
//
// Every (token, query head) row is one task. Within a row the arithmetic is
// sequential over keys, as llama.cpp's is, so the result does not depend on
// the thread count. The AVX-512 path and the scalar path perform the same
// operations in the same order (the scalar one spells out the lane-wise
// multiply-adds and the 16-lane reduction tree), so they agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/HalfAccumulatingAttention.h"

#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <cmath>
#include <limits>

namespace spanc::cpu {

namespace {

constexpr int kLanes = 16;
/// ggml's f16 vector step on AVX-512: four 16-lane registers.
constexpr int kStep = 4 * kLanes;

/// K/V element `index` (in elements from the layer's base) of `base`, in
/// the view's storage precision, as f32.
inline float loadElement(const PagedKvView &view, const void *base,
                         int64_t index) {
  if (view.precision == KvPrecision::F16)
    return cpu::loadElement(static_cast<const uint16_t *>(base) + index);
  return cpu::loadElement(static_cast<const float *>(base) + index);
}

/// One page of one KV head: its key column and value row of a slot, as f32.
struct PageAccess {
  const PagedKvView *kv;
  int64_t offset; ///< elements from the layer's base to (block, head)
  void key(int slot, int headDim, float *out) const {
    for (int d = 0; d < headDim; ++d)
      out[d] = loadElement(*kv, kv->keys,
                           offset + int64_t(d) * kv->blockSize + slot);
  }
  void value(int slot, int headDim, float *out) const {
    for (int d = 0; d < headDim; ++d)
      out[d] =
          loadElement(*kv, kv->values, offset + int64_t(slot) * headDim + d);
  }
};

inline PageAccess pageOf(const PagedKvView &kv, int32_t block, int kvHead) {
  return {&kv, int64_t(block) * kv.blockStride + kvHead * kv.headStride};
}

/// The sum of 16 lanes in the order GCC's _mm512_reduce_add_ps adds them:
/// upper and lower 256 bits, then 128, then pairs.
float reduceLanes(const float *lanes) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i)
    t3[i] = lanes[8 + i] + lanes[i];
  for (int i = 0; i < 4; ++i)
    t6[i] = t3[4 + i] + t3[i];
  float t80 = t6[0] + t6[2], t81 = t6[1] + t6[3];
  return t80 + t81;
}

/// One row, portable: the reference for the vector path.
void attendRowScalar(const PagedAttentionShape &shape,
                     const PagedAttentionBatch &batch, const PagedKvView &kv,
                     int sequence, int kvHead, const float *query,
                     int64_t lastKey, float *out) {
  const int headDim = shape.headDim;
  float queryHalf[kernels::kMaxHeadDim], accumulator[kernels::kMaxHeadDim];
  for (int d = 0; d < headDim; ++d) {
    queryHalf[d] = roundToHalf(query[d]);
    accumulator[d] = 0.0f;
  }
  const int vectorDims = headDim - headDim % kStep;
  float maximum = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  int64_t logical = 0;
  for (int32_t page = batch.pageOffsets[sequence];
       page < batch.pageOffsets[sequence + 1] && logical <= lastKey; ++page) {
    PageAccess access = pageOf(kv, batch.blockIds[page], kvHead);
    for (int32_t slot = 0; slot < batch.validTokens[page] && logical <= lastKey;
         ++slot, ++logical) {
      float key[kernels::kMaxHeadDim], value[kernels::kMaxHeadDim];
      access.key(slot, headDim, key);
      access.value(slot, headDim, value);
      // The dot product: per lane j of register r, fma over the steps.
      float lanes[4][kLanes] = {};
      for (int base = 0; base < vectorDims; base += kStep)
        for (int r = 0; r < 4; ++r)
          for (int j = 0; j < kLanes; ++j) {
            int d = base + r * kLanes + j;
            lanes[r][j] = std::fma(key[d], queryHalf[d], lanes[r][j]);
          }
      float combined[kLanes];
      for (int j = 0; j < kLanes; ++j)
        combined[j] = (lanes[0][j] + lanes[2][j]) + (lanes[1][j] + lanes[3][j]);
      double total = reduceLanes(combined);
      for (int d = vectorDims; d < headDim; ++d)
        total += double(key[d] * queryHalf[d]);
      float score = float(total) * shape.scale;

      float weight = 1.0f, rescale = 1.0f;
      if (score > maximum) {
        rescale = std::exp(maximum - score);
        maximum = score;
        for (int d = 0; d < headDim; ++d)
          accumulator[d] = roundToHalf(accumulator[d] * rescale);
      } else {
        weight = std::exp(score - maximum);
      }
      for (int d = 0; d < headDim; ++d)
        accumulator[d] =
            roundToHalf(std::fma(value[d], weight, accumulator[d]));
      sum = std::fma(sum, rescale, weight);
    }
  }
  const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int d = 0; d < headDim; ++d)
    out[d] = accumulator[d] * inverse;
}

/// One row with AVX-512 (headDim % 64 == 0).
SPANC_AVX512 void attendRowAvx512(const PagedAttentionShape &shape,
                                  const PagedAttentionBatch &batch,
                                  const PagedKvView &kv, int sequence,
                                  int kvHead, const float *query,
                                  int64_t lastKey, float *out) {
  const int headDim = shape.headDim;
  const int registers = headDim / kLanes;
  __m512 queryHalf[kernels::kMaxHeadDim / kLanes];
  __m256i accumulator[kernels::kMaxHeadDim / kLanes]; // f16 lanes
  for (int r = 0; r < registers; ++r) {
    queryHalf[r] = _mm512_cvtph_ps(_mm512_cvtps_ph(
        _mm512_loadu_ps(query + r * kLanes), _MM_FROUND_TO_NEAREST_INT));
    accumulator[r] = _mm256_setzero_si256();
  }
  // Dimension-major K: gather the slot's column once per key.
  alignas(64) float key[kernels::kMaxHeadDim], value[kernels::kMaxHeadDim];
  float maximum = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  int64_t logical = 0;
  for (int32_t page = batch.pageOffsets[sequence];
       page < batch.pageOffsets[sequence + 1] && logical <= lastKey; ++page) {
    PageAccess access = pageOf(kv, batch.blockIds[page], kvHead);
    for (int32_t slot = 0; slot < batch.validTokens[page] && logical <= lastKey;
         ++slot, ++logical) {
      access.key(slot, headDim, key);
      access.value(slot, headDim, value);
      __m512 partial[4];
      for (int r = 0; r < 4; ++r)
        partial[r] = _mm512_setzero_ps();
      for (int base = 0; base < registers; base += 4)
        for (int r = 0; r < 4; ++r)
          partial[r] =
              _mm512_fmadd_ps(_mm512_load_ps(key + (base + r) * kLanes),
                              queryHalf[base + r], partial[r]);
      __m512 combined = _mm512_add_ps(_mm512_add_ps(partial[0], partial[2]),
                                      _mm512_add_ps(partial[1], partial[3]));
      float score = _mm512_reduce_add_ps(combined) * shape.scale;

      float weight = 1.0f, rescale = 1.0f;
      if (score > maximum) {
        rescale = std::exp(maximum - score);
        maximum = score;
        const __m512 factor = _mm512_set1_ps(rescale);
        for (int r = 0; r < registers; ++r)
          accumulator[r] = _mm512_cvtps_ph(
              _mm512_mul_ps(_mm512_cvtph_ps(accumulator[r]), factor),
              _MM_FROUND_TO_NEAREST_INT);
      } else {
        weight = std::exp(score - maximum);
      }
      const __m512 factor = _mm512_set1_ps(weight);
      for (int r = 0; r < registers; ++r)
        accumulator[r] = _mm512_cvtps_ph(
            _mm512_fmadd_ps(_mm512_loadu_ps(value + r * kLanes), factor,
                            _mm512_cvtph_ps(accumulator[r])),
            _MM_FROUND_TO_NEAREST_INT);
      sum = std::fma(sum, rescale, weight);
    }
  }
  const __m512 inverse = _mm512_set1_ps(sum == 0.0f ? 0.0f : 1.0f / sum);
  for (int r = 0; r < registers; ++r)
    _mm512_storeu_ps(out + r * kLanes,
                     _mm512_mul_ps(_mm512_cvtph_ps(accumulator[r]), inverse));
}

} // namespace

bool hasHalfAccumulatingAttention() { return cpuFeatures().hasAvx512(); }

void halfAccumulatingAttention(const PagedAttentionShape &shape,
                               const PagedAttentionBatch &batch,
                               const PagedKvView &kv, const float *queries,
                               float *output, bool forceScalar) {
  const int numSequences = batch.numSequences;
  const int64_t numTokens = batch.queryOffsets[numSequences];
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const bool vector = !forceScalar && hasHalfAccumulatingAttention() &&
                      shape.headDim % kStep == 0 &&
                      shape.headDim <= kernels::kMaxHeadDim;
  const int64_t numRows = numTokens * shape.numQueryHeads;
#pragma omp parallel for schedule(dynamic, 4) if (numRows > 1)
  for (int64_t row = 0; row < numRows; ++row) {
    const int64_t token = row / shape.numQueryHeads;
    const int head = int(row % shape.numQueryHeads);
    // The sequence owning the token (few sequences: a linear scan).
    int sequence = 0;
    while (batch.queryOffsets[sequence + 1] <= token)
      ++sequence;
    int64_t length = 0;
    for (int32_t page = batch.pageOffsets[sequence];
         page < batch.pageOffsets[sequence + 1]; ++page)
      length += batch.validTokens[page];
    const int64_t queriesInSequence =
        batch.queryOffsets[sequence + 1] - batch.queryOffsets[sequence];
    const int64_t lastKey =
        length - queriesInSequence + (token - batch.queryOffsets[sequence]);
    const float *query =
        queries + token * shape.queryRowStride + int64_t(head) * shape.headDim;
    float *out =
        output + token * shape.outputRowStride + int64_t(head) * shape.headDim;
    if (vector)
      attendRowAvx512(shape, batch, kv, sequence, head / groupSize, query,
                      lastKey, out);
    else
      attendRowScalar(shape, batch, kv, sequence, head / groupSize, query,
                      lastKey, out);
  }
}

} // namespace spanc::cpu
