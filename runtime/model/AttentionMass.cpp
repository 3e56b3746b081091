//===- AttentionMass.cpp - How much attention each key receives -----------===//

#include "runtime/model/AttentionMass.h"

#include "runtime/kernels/cpu/Half.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spanc::model {

namespace {

/// Key `slot` of a dimension-major block of one KV head, widened to f32.
template <typename Element>
void loadKey(const Element *block, int blockSize, int slot, int headDim,
             float *key) {
  for (int d = 0; d < headDim; ++d)
    key[d] = cpu::loadElement(block + int64_t(d) * blockSize + slot);
}

} // namespace

void accumulateKeyMass(const KeyMassShape &shape, const float *queries,
                       int64_t numQueries, llvm::ArrayRef<int32_t> blockIds,
                       llvm::ArrayRef<int32_t> validTokens,
                       const cpu::PagedKvView &kv,
                       const cpu::RopeTable *keyRope, float *keyMass,
                       std::vector<float> &scores,
                       std::vector<float> &transposed) {
  int64_t length = 0;
  for (int32_t valid : validTokens)
    length += valid;
  if (numQueries <= 0 || length < numQueries)
    return;
  const int numHeads = shape.numQueryHeads;
  const int group = numHeads / shape.numKvHeads;
  const int headDim = shape.headDim;
  const int64_t firstQuery = length - numQueries;
  const int64_t numRows = numQueries * numHeads;
  scores.assign(size_t(numRows * length),
                -std::numeric_limits<float>::infinity());
  const int elementBytes = cpu::kvElementBytes(kv.precision);
  // A probe is a few rows: below this many scores a team of threads costs
  // more in barriers than it saves (on a loaded machine, much more). The
  // sums do not depend on the split.
  const bool parallel = numRows * length >= (int64_t(1) << 18);

  // Queries transposed per head ([head][dim][row]), so that one key meets
  // every row of a head in a loop over rows the compiler vectorizes.
  transposed.resize(size_t(numHeads) * headDim * numQueries);
  for (int64_t row = 0; row < numQueries; ++row)
    for (int head = 0; head < numHeads; ++head)
      for (int d = 0; d < headDim; ++d)
        transposed[(size_t(head) * headDim + d) * numQueries + row] =
            queries[row * shape.queryRowStride + int64_t(head) * headDim + d];

        // Scores, one KV head at a time: each key is loaded (and rotated) once
        // and met by the rows of every query head of its group.
#pragma omp parallel for schedule(static) if (parallel)
  for (int kvHead = 0; kvHead < shape.numKvHeads; ++kvHead) {
    std::vector<float> key(static_cast<size_t>(headDim));
    std::vector<float> dots(static_cast<size_t>(numQueries));
    int64_t logical = 0;
    for (size_t page = 0; page < blockIds.size(); ++page) {
      const char *base = static_cast<const char *>(kv.keys) +
                         (int64_t(blockIds[page]) * kv.blockStride +
                          int64_t(kvHead) * kv.headStride) *
                             elementBytes;
      for (int slot = 0; slot < validTokens[page]; ++slot, ++logical) {
        if (kv.precision == cpu::KvPrecision::F16)
          loadKey(reinterpret_cast<const uint16_t *>(base), kv.blockSize, slot,
                  headDim, key.data());
        else
          loadKey(reinterpret_cast<const float *>(base), kv.blockSize, slot,
                  headDim, key.data());
        if (keyRope)
          cpu::rotateHead(keyRope->config().order, keyRope->config().rotaryDim,
                          keyRope->row(logical), key.data(), 1);
        const int64_t firstRow = std::max<int64_t>(0, logical - firstQuery);
        for (int g = 0; g < group; ++g) {
          const int head = kvHead * group + g;
          const float *columns =
              transposed.data() + size_t(head) * headDim * numQueries;
          std::fill(dots.begin(), dots.end(), 0.0f);
          for (int d = 0; d < headDim; ++d) {
            const float k = key[size_t(d)];
            const float *column = columns + int64_t(d) * numQueries;
            for (int64_t row = 0; row < numQueries; ++row)
              dots[size_t(row)] += column[row] * k;
          }
          for (int64_t row = firstRow; row < numQueries; ++row)
            scores[size_t((row * numHeads + head) * length + logical)] =
                dots[size_t(row)] * shape.scale;
        }
      }
    }
  }

  // Each (row, head)'s softmax over the keys it sees.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t index = 0; index < numRows; ++index) {
    float *row = scores.data() + index * length;
    const int64_t seen = firstQuery + index / numHeads + 1;
    float maximum = -std::numeric_limits<float>::infinity();
    for (int64_t key = 0; key < seen; ++key)
      maximum = std::max(maximum, row[key]);
    double sum = 0;
    for (int64_t key = 0; key < seen; ++key) {
      row[key] = std::exp(row[key] - maximum);
      sum += row[key];
    }
    const float inverse = float(1.0 / sum);
    for (int64_t key = 0; key < seen; ++key)
      row[key] *= inverse;
    for (int64_t key = seen; key < length; ++key)
      row[key] = 0;
  }

  // Summed per key, over rows and heads.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t key = 0; key < length; ++key) {
    float sum = 0;
    for (int64_t index = 0; index < numRows; ++index)
      sum += scores[size_t(index * length + key)];
    keyMass[key] += sum;
  }
}

} // namespace spanc::model
