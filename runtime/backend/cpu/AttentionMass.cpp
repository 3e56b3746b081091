//===- AttentionMass.cpp - How much attention each key receives -----------===//

#include "runtime/backend/cpu/AttentionMass.h"

#include "runtime/kernels/cpu/Half.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spanc::backend {

namespace {

/// Block `page` of one KV head widened to f32 in its own dimension-major
/// layout ([dim][slot]): one contiguous run of slots per dimension.
template <typename Element>
void widenBlock(const Element *block, int blockSize, int valid, int headDim,
                float *keys) {
  for (int d = 0; d < headDim; ++d)
    for (int slot = 0; slot < valid; ++slot)
      keys[d * blockSize + slot] =
          cpu::loadElement(block + int64_t(d) * blockSize + slot);
}

} // namespace

// Every probability is computed with the same operations in the same order
// as a key-at-a-time loop would (a dot's terms in dimension order, a row's
// exp sum in key order, a key's mass in row order), so the choice of
// layout and thread split changes no bit of the result.
void accumulateKeyMass(const KeyMassShape &shape, const float *queries,
                       int64_t numQueries, llvm::ArrayRef<int32_t> blockIds,
                       llvm::ArrayRef<int32_t> validTokens,
                       const cpu::PagedKvView &kv,
                       const cpu::RopeTable *keyRope, float *keyMass,
                       std::vector<float> &scores,
                       std::vector<float> &transposed) {
  const int64_t numPages = int64_t(blockIds.size());
  std::vector<int64_t> pageStart(size_t(numPages) + 1, 0);
  for (int64_t page = 0; page < numPages; ++page)
    pageStart[size_t(page) + 1] = pageStart[size_t(page)] + validTokens[page];
  const int64_t length = pageStart.back();
  if (numQueries <= 0 || length < numQueries)
    return;
  const int numHeads = shape.numQueryHeads;
  const int group = numHeads / shape.numKvHeads;
  const int headDim = shape.headDim;
  const int blockSize = kv.blockSize;
  const int64_t firstQuery = length - numQueries;
  const int64_t numRows = numQueries * numHeads;
  // Row (query row, head) of `scores` holds its scores, then probabilities,
  // over the keys it sees; the rest of the row is never read.
  scores.resize(size_t(numRows * length));
  const int elementBytes = cpu::kvElementBytes(kv.precision);
  // A probe is a few rows: below this many scores a team of threads costs
  // more in barriers than it saves (on a loaded machine, much more).
  const bool parallel = numRows * length >= (int64_t(1) << 18);

  // Queries transposed per head ([head][dim][row]), so that one key
  // dimension meets every row of a head in a loop over rows the compiler
  // vectorizes.
  transposed.resize(size_t(numHeads) * headDim * numQueries);
  for (int64_t row = 0; row < numQueries; ++row)
    for (int head = 0; head < numHeads; ++head)
      for (int d = 0; d < headDim; ++d)
        transposed[(size_t(head) * headDim + d) * numQueries + row] =
            queries[row * shape.queryRowStride + int64_t(head) * headDim + d];

#pragma omp parallel if (parallel)
  {
    // Scores, a page at a time: its keys of each KV head are widened (and
    // rotated) once and met by the rows of every query head of the group.
    std::vector<float> keys(size_t(headDim) * blockSize);
    std::vector<float> dots(size_t(blockSize) * numQueries);
#pragma omp for schedule(static)
    for (int64_t page = 0; page < numPages; ++page) {
      const int valid = validTokens[page];
      const int64_t first = pageStart[size_t(page)];
      for (int kvHead = 0; kvHead < shape.numKvHeads; ++kvHead) {
        const char *base = static_cast<const char *>(kv.keys) +
                           (int64_t(blockIds[page]) * kv.blockStride +
                            int64_t(kvHead) * kv.headStride) *
                               elementBytes;
        if (kv.precision == cpu::KvPrecision::F16)
          widenBlock(reinterpret_cast<const uint16_t *>(base), blockSize, valid,
                     headDim, keys.data());
        else
          widenBlock(reinterpret_cast<const float *>(base), blockSize, valid,
                     headDim, keys.data());
        if (keyRope)
          for (int slot = 0; slot < valid; ++slot)
            cpu::rotateHead(
                keyRope->config().order, keyRope->config().rotaryDim,
                keyRope->row(first + slot), keys.data() + slot, blockSize);
        for (int g = 0; g < group; ++g) {
          const int head = kvHead * group + g;
          const float *columns =
              transposed.data() + size_t(head) * headDim * numQueries;
          std::fill(dots.begin(), dots.end(), 0.0f);
          for (int d = 0; d < headDim; ++d) {
            const float *column = columns + int64_t(d) * numQueries;
            for (int slot = 0; slot < valid; ++slot) {
              const float k = keys[size_t(d) * blockSize + slot];
              float *slotDots = dots.data() + int64_t(slot) * numQueries;
#pragma omp simd
              for (int64_t row = 0; row < numQueries; ++row)
                slotDots[row] += column[row] * k;
            }
          }
          for (int slot = 0; slot < valid; ++slot) {
            const int64_t logical = first + slot;
            const float *slotDots = dots.data() + int64_t(slot) * numQueries;
            for (int64_t row = std::max<int64_t>(0, logical - firstQuery);
                 row < numQueries; ++row)
              scores[size_t((row * numHeads + head) * length + logical)] =
                  slotDots[row] * shape.scale;
          }
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
#pragma omp simd
    for (int64_t key = 0; key < seen; ++key)
      row[key] *= inverse;
  }

  // Summed per key over rows and heads in row order, a range of keys per
  // thread walking the rows contiguously. A row adds nothing past the keys
  // it sees.
#pragma omp parallel if (parallel)
  {
    std::vector<float> sums;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < (length + 1023) / 1024; ++chunk) {
      const int64_t begin = chunk * 1024;
      const int64_t end = std::min(length, begin + 1024);
      sums.assign(size_t(end - begin), 0.0f);
      for (int64_t index = 0; index < numRows; ++index) {
        const float *row = scores.data() + index * length;
        const int64_t stop = std::min(end, firstQuery + index / numHeads + 1);
#pragma omp simd
        for (int64_t key = begin; key < stop; ++key)
          sums[size_t(key - begin)] += row[key];
      }
      for (int64_t key = begin; key < end; ++key)
        keyMass[key] += sums[size_t(key - begin)];
    }
  }
}

} // namespace spanc::backend
