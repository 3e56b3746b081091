//===- Rerope.cpp - ReRoPE relocation of stored K blocks ------------------===//

#include "runtime/kv/Rerope.h"

#include <immintrin.h>

#include <cassert>
#include <cmath>
#include <cstring>

namespace spanc::kv {

std::vector<double> ropeFrequencies(double theta, int rotaryDim,
                                    double frequencyScale) {
  std::vector<double> frequencies(size_t(rotaryDim / 2));
  for (int pair = 0; pair < rotaryDim / 2; ++pair)
    frequencies[size_t(pair)] =
        std::pow(theta, -2.0 * pair / rotaryDim) * frequencyScale;
  return frequencies;
}

namespace {

/// Per-op rotation table: for Normal pairing cos/sin are stored duplicated
/// per dimension ([c0 c0 c1 c1 ...], [-s0 s0 -s1 s1 ...]) so the token-major
/// vector path needs no shuffles of the table; for NeoX cos/sin per pair.
struct OpTable {
  const float *cosValues;
  const float *sinValues;
};

/// Fills `table` (2 * rotaryDim floats per op) for every op, in double.
void fillTables(const RopeRotation &rotation, llvm::ArrayRef<RelocationOp> ops,
                float *table) {
  const int rotaryDim = rotation.rotaryDim;
  const int half = rotaryDim / 2;
#pragma omp parallel for schedule(static) if (ops.size() > 8)
  for (size_t index = 0; index < ops.size(); ++index) {
    float *cosValues = table + index * 2 * size_t(rotaryDim);
    float *sinValues = cosValues + rotaryDim;
    for (int pair = 0; pair < half; ++pair) {
      double angle = double(ops[index].delta) * rotation.frequencies[pair];
      float c = float(std::cos(angle)), s = float(std::sin(angle));
      if (rotation.pairing == RopePairing::Normal) {
        cosValues[2 * pair] = cosValues[2 * pair + 1] = c;
        sinValues[2 * pair] = -s;
        sinValues[2 * pair + 1] = s;
      } else {
        cosValues[pair] = cosValues[pair + half] = c;
        sinValues[pair] = sinValues[pair + half] = s;
      }
    }
  }
}

OpTable tableFor(const RopeRotation &rotation, const float *table,
                 size_t index) {
  const float *cosValues = table + index * 2 * size_t(rotation.rotaryDim);
  return {cosValues, cosValues + rotation.rotaryDim};
}

/// The two dimensions of pair `pair` and its cos/sin.
inline void pairDims(const RopeRotation &rotation, int pair, int &first,
                     int &second) {
  if (rotation.pairing == RopePairing::Normal) {
    first = 2 * pair;
    second = 2 * pair + 1;
  } else {
    first = pair;
    second = pair + rotation.rotaryDim / 2;
  }
}

/// Copies one head's non-rotating dims (and, for a duplicate, nothing else:
/// the rotating dims are written by the rotation itself).
void copyTailDims(const KvBlockLayout &layout, const RopeRotation &rotation,
                  const float *source, float *destination) {
  for (int token = 0; token < layout.blockSize; ++token)
    for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim) {
      int64_t offset = token * layout.tokenStride + dim * layout.dimStride;
      destination[offset] = source[offset];
    }
}

/// Copies one block of V for one layer: each head's V is blockSize * headDim
/// contiguous floats (in whatever order within).
void copyValues(const KvBlockLayout &layout, const float *source,
                float *destination) {
  const int64_t headElements = int64_t(layout.blockSize) * layout.headDim;
  if (layout.headStride == headElements) {
    std::memcpy(destination, source,
                sizeof(float) * size_t(headElements) * layout.numKvHeads);
    return;
  }
  for (int head = 0; head < layout.numKvHeads; ++head)
    std::memcpy(destination + head * layout.headStride,
                source + head * layout.headStride,
                sizeof(float) * size_t(headElements));
}

/// Rotates one layer of one block's K, any layout.
void rotateLayerScalar(const KvBlockLayout &layout,
                       const RopeRotation &rotation, const OpTable &table,
                       const float *source, float *destination) {
  const int half = rotation.rotaryDim / 2;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    const float *from = source + head * layout.headStride;
    float *to = destination + head * layout.headStride;
    for (int token = 0; token < layout.blockSize; ++token) {
      const float *x = from + token * layout.tokenStride;
      float *y = to + token * layout.tokenStride;
      for (int pair = 0; pair < half; ++pair) {
        int first, second;
        pairDims(rotation, pair, first, second);
        // Normal tables hold [c c] / [-s s] per pair, NeoX [c..][c..].
        float c = table.cosValues[first], s = table.sinValues[second];
        float a = x[first * layout.dimStride];
        float b = x[second * layout.dimStride];
        y[first * layout.dimStride] = a * c - b * s;
        y[second * layout.dimStride] = a * s + b * c;
      }
    }
    if (source != destination)
      copyTailDims(layout, rotation, from, to);
  }
}

/// Token-major heads (dimStride 1): each token's head is one contiguous row.
__attribute__((target("avx512f"))) void
rotateLayerTokenMajor(const KvBlockLayout &layout, const RopeRotation &rotation,
                      const OpTable &table, const float *source,
                      float *destination) {
  const int rotaryDim = rotation.rotaryDim;
  const int half = rotaryDim / 2;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    for (int token = 0; token < layout.blockSize; ++token) {
      int64_t offset = head * layout.headStride + token * layout.tokenStride;
      const float *x = source + offset;
      float *y = destination + offset;
      if (rotation.pairing == RopePairing::Normal) {
        for (int dim = 0; dim < rotaryDim; dim += 16) {
          __m512 value = _mm512_loadu_ps(x + dim);
          // Swap the two lanes of each pair: (x1 x0 x3 x2 ...).
          __m512 swapped = _mm512_shuffle_ps(value, value, 0xB1);
          __m512 result = _mm512_fmadd_ps(
              swapped, _mm512_loadu_ps(table.sinValues + dim),
              _mm512_mul_ps(value, _mm512_loadu_ps(table.cosValues + dim)));
          _mm512_storeu_ps(y + dim, result);
        }
      } else {
        for (int dim = 0; dim < half; dim += 16) {
          __m512 a = _mm512_loadu_ps(x + dim);
          __m512 b = _mm512_loadu_ps(x + half + dim);
          __m512 c = _mm512_loadu_ps(table.cosValues + dim);
          __m512 s = _mm512_loadu_ps(table.sinValues + dim);
          _mm512_storeu_ps(y + dim,
                           _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
          _mm512_storeu_ps(y + half + dim,
                           _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
        }
      }
      if (source != destination && rotaryDim < layout.headDim)
        std::memcpy(y + rotaryDim, x + rotaryDim,
                    sizeof(float) * size_t(layout.headDim - rotaryDim));
    }
  }
}

/// Dimension-major heads (tokenStride 1): a dimension's values for all the
/// block's tokens are one contiguous row, so 16 tokens turn in one vector.
__attribute__((target("avx512f"))) void
rotateLayerDimMajor(const KvBlockLayout &layout, const RopeRotation &rotation,
                    const OpTable &table, const float *source,
                    float *destination) {
  const int half = rotation.rotaryDim / 2;
  const int blockSize = layout.blockSize;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    const float *from = source + head * layout.headStride;
    float *to = destination + head * layout.headStride;
    for (int pair = 0; pair < half; ++pair) {
      int first, second;
      pairDims(rotation, pair, first, second);
      __m512 c = _mm512_set1_ps(table.cosValues[first]);
      __m512 s = _mm512_set1_ps(table.sinValues[second]);
      const float *rowA = from + first * layout.dimStride;
      const float *rowB = from + second * layout.dimStride;
      float *outA = to + first * layout.dimStride;
      float *outB = to + second * layout.dimStride;
      for (int token = 0; token < blockSize; token += 16) {
        __mmask16 mask = blockSize - token >= 16
                             ? __mmask16(0xFFFF)
                             : __mmask16((1u << (blockSize - token)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(mask, rowA + token);
        __m512 b = _mm512_maskz_loadu_ps(mask, rowB + token);
        _mm512_mask_storeu_ps(outA + token, mask,
                              _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
        _mm512_mask_storeu_ps(outB + token, mask,
                              _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
      }
    }
    if (source != destination)
      for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim)
        std::memcpy(to + dim * layout.dimStride, from + dim * layout.dimStride,
                    sizeof(float) * size_t(blockSize));
  }
}

/// Dimension-major heads with 16-token blocks (KvStorage's K layout at the
/// default block size): one unmasked vector per dimension row, everything
/// the loop needs in registers.
__attribute__((target("avx512f"))) void
rotateLayerDimMajor16(const KvBlockLayout &layout, const RopeRotation &rotation,
                      const OpTable &table, const float *source,
                      float *destination) {
  const int numHeads = layout.numKvHeads;
  const int half = rotation.rotaryDim / 2;
  const int64_t headStride = layout.headStride;
  const int64_t dimStride = layout.dimStride;
  // Row offsets of the two dims of pair p: Normal 2p, 2p+1; NeoX p, p+half.
  const int64_t firstStep = rotation.pairing == RopePairing::Normal ? 2 : 1;
  const int64_t secondOffset =
      rotation.pairing == RopePairing::Normal ? 1 : half;
  const float *__restrict cosValues = table.cosValues;
  const float *__restrict sinValues = table.sinValues;
  for (int head = 0; head < numHeads; ++head) {
    const float *from = source + head * headStride;
    float *to = destination + head * headStride;
#pragma GCC unroll 4
    for (int pair = 0; pair < half; ++pair) {
      const int64_t first = pair * firstStep;
      const int64_t second = first + secondOffset;
      const __m512 c = _mm512_set1_ps(cosValues[first]);
      const __m512 s = _mm512_set1_ps(sinValues[second]);
      const __m512 a = _mm512_loadu_ps(from + first * dimStride);
      const __m512 b = _mm512_loadu_ps(from + second * dimStride);
      _mm512_storeu_ps(to + first * dimStride,
                       _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
      _mm512_storeu_ps(to + second * dimStride,
                       _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
    }
    if (source != destination)
      for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim)
        std::memcpy(to + dim * dimStride, from + dim * dimStride,
                    sizeof(float) * 16);
  }
}

enum class Path { Scalar, TokenMajor, DimMajor, DimMajor16 };

/// Relocations of fewer blocks run on the calling thread.
constexpr size_t MinParallelOps = 8;

Path choosePath(const KvBlockLayout &layout, const RopeRotation &rotation,
                bool allowVector) {
  if (!allowVector || !__builtin_cpu_supports("avx512f"))
    return Path::Scalar;
  if (layout.tokenStride == 1)
    return layout.blockSize == 16 ? Path::DimMajor16 : Path::DimMajor;
  if (layout.dimStride == 1) {
    int unit = rotation.pairing == RopePairing::Normal ? rotation.rotaryDim
                                                       : rotation.rotaryDim / 2;
    if (unit % 16 == 0)
      return Path::TokenMajor;
  }
  return Path::Scalar;
}

void relocate(const KvBlockLayout &layout, const RopeRotation &rotation,
              float *const *keyLayers, float *const *valueLayers,
              llvm::ArrayRef<RelocationOp> ops, bool allowVector) {
  assert(rotation.rotaryDim % 2 == 0 && rotation.rotaryDim <= layout.headDim);
  if (ops.empty())
    return;
  // One table for the call, outside every per-token loop.
  std::vector<float> tables(ops.size() * 2 * size_t(rotation.rotaryDim));
  fillTables(rotation, ops, tables.data());
  const Path path = choosePath(layout, rotation, allowVector);
  // Layer-major items: consecutive items walk consecutive blocks of one
  // layer's array (a span's blocks are usually allocated together), which
  // keeps the hardware prefetchers on one long stream.
  const int64_t numOps = int64_t(ops.size());
  const int64_t numItems = numOps * layout.numLayers;
  // A few blocks take microseconds on one thread; a parallel region costs
  // more than it saves there (and, on a busy machine, a barrier can wait a
  // whole time slice for a descheduled thread).
#pragma omp parallel for schedule(static) if (ops.size() >= MinParallelOps)
  for (int64_t item = 0; item < numItems; ++item) {
    const size_t index = size_t(item % numOps);
    const int layer = int(item / numOps);
    const RelocationOp &op = ops[index];
    const OpTable table = tableFor(rotation, tables.data(), index);
    const float *sourceKeys = keyLayers[layer] + op.source * layout.blockStride;
    float *destinationKeys =
        keyLayers[layer] + op.destination * layout.blockStride;
    switch (path) {
    case Path::TokenMajor:
      rotateLayerTokenMajor(layout, rotation, table, sourceKeys,
                            destinationKeys);
      break;
    case Path::DimMajor:
      rotateLayerDimMajor(layout, rotation, table, sourceKeys, destinationKeys);
      break;
    case Path::DimMajor16:
      rotateLayerDimMajor16(layout, rotation, table, sourceKeys,
                            destinationKeys);
      break;
    case Path::Scalar:
      rotateLayerScalar(layout, rotation, table, sourceKeys, destinationKeys);
      break;
    }
    if (op.source != op.destination)
      copyValues(layout, valueLayers[layer] + op.source * layout.blockStride,
                 valueLayers[layer] + op.destination * layout.blockStride);
  }
}

} // namespace

void relocateBlocks(const KvBlockLayout &layout, const RopeRotation &rotation,
                    float *const *keyLayers, float *const *valueLayers,
                    llvm::ArrayRef<RelocationOp> ops) {
  relocate(layout, rotation, keyLayers, valueLayers, ops, true);
}

void relocateBlocksScalar(const KvBlockLayout &layout,
                          const RopeRotation &rotation, float *const *keyLayers,
                          float *const *valueLayers,
                          llvm::ArrayRef<RelocationOp> ops) {
  relocate(layout, rotation, keyLayers, valueLayers, ops, false);
}

bool relocationUsesAvx512(const KvBlockLayout &layout,
                          const RopeRotation &rotation) {
  return choosePath(layout, rotation, true) != Path::Scalar;
}

} // namespace spanc::kv
