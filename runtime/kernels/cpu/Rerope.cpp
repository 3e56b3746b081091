//===- Rerope.cpp - ReRoPE relocation of stored K blocks ------------------===//

#include "runtime/kernels/cpu/Rerope.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/HelperThreads.h"

#include <cassert>
#include <cmath>
#include <cstring>

namespace spanc::cpu {

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

/// Fills `table` (2 * rotaryDim floats per delta) for every delta, in
/// double.
void fillTables(const RopeRotation &rotation, llvm::ArrayRef<int64_t> deltas,
                float *table) {
  const int rotaryDim = rotation.rotaryDim;
  const int half = rotaryDim / 2;
  for (size_t index = 0; index < deltas.size(); ++index) {
    float *cosValues = table + index * 2 * size_t(rotaryDim);
    float *sinValues = cosValues + rotaryDim;
    for (int pair = 0; pair < half; ++pair) {
      double angle = double(deltas[index]) * rotation.frequencies[pair];
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
template <typename Element>
void copyTailDims(const KvBlockLayout &layout, const RopeRotation &rotation,
                  const Element *source, Element *destination) {
  for (int token = 0; token < layout.blockSize; ++token)
    for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim) {
      int64_t offset = token * layout.tokenStride + dim * layout.dimStride;
      destination[offset] = source[offset];
    }
}

/// Copies one layer of one block's K or V: each head's K or V is blockSize *
/// headDim contiguous elements (in whatever order within).
void copyHeads(const KvBlockLayout &layout, const char *source,
               char *destination) {
  const size_t elementBytes = size_t(cpu::kvElementBytes(layout.precision));
  const int64_t headElements = int64_t(layout.blockSize) * layout.headDim;
  if (layout.headStride == headElements) {
    std::memcpy(destination, source,
                elementBytes * size_t(headElements) * layout.numKvHeads);
    return;
  }
  for (int head = 0; head < layout.numKvHeads; ++head)
    std::memcpy(destination + head * layout.headStride * elementBytes,
                source + head * layout.headStride * elementBytes,
                elementBytes * size_t(headElements));
}

/// Rotates one layer of one block's K, any layout.
template <typename Element>
void rotateLayerScalar(const KvBlockLayout &layout,
                       const RopeRotation &rotation, const OpTable &table,
                       const Element *source, Element *destination) {
  const int half = rotation.rotaryDim / 2;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    const Element *from = source + head * layout.headStride;
    Element *to = destination + head * layout.headStride;
    for (int token = 0; token < layout.blockSize; ++token) {
      const Element *x = from + token * layout.tokenStride;
      Element *y = to + token * layout.tokenStride;
      for (int pair = 0; pair < half; ++pair) {
        int first, second;
        pairDims(rotation, pair, first, second);
        // Normal tables hold [c c] / [-s s] per pair, NeoX [c..][c..].
        float c = table.cosValues[first], s = table.sinValues[second];
        float a = cpu::loadElement(x + first * layout.dimStride);
        float b = cpu::loadElement(x + second * layout.dimStride);
        cpu::storeElement(y + first * layout.dimStride, a * c - b * s);
        cpu::storeElement(y + second * layout.dimStride, a * s + b * c);
      }
    }
    if (source != destination)
      copyTailDims(layout, rotation, from, to);
  }
}

/// Token-major heads (dimStride 1): each token's head is one contiguous row.
template <typename Element>
SPANC_AVX512 void
rotateLayerTokenMajor(const KvBlockLayout &layout, const RopeRotation &rotation,
                      const OpTable &table, const Element *source,
                      Element *destination) {
  const int rotaryDim = rotation.rotaryDim;
  const int half = rotaryDim / 2;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    for (int token = 0; token < layout.blockSize; ++token) {
      int64_t offset = head * layout.headStride + token * layout.tokenStride;
      const Element *x = source + offset;
      Element *y = destination + offset;
      if (rotation.pairing == RopePairing::Normal) {
        for (int dim = 0; dim < rotaryDim; dim += 16) {
          __m512 value = cpu::load16(x + dim);
          // Swap the two lanes of each pair: (x1 x0 x3 x2 ...).
          __m512 swapped = _mm512_shuffle_ps(value, value, 0xB1);
          __m512 result = _mm512_fmadd_ps(
              swapped, _mm512_loadu_ps(table.sinValues + dim),
              _mm512_mul_ps(value, _mm512_loadu_ps(table.cosValues + dim)));
          cpu::store16(y + dim, result);
        }
      } else {
        for (int dim = 0; dim < half; dim += 16) {
          __m512 a = cpu::load16(x + dim);
          __m512 b = cpu::load16(x + half + dim);
          __m512 c = _mm512_loadu_ps(table.cosValues + dim);
          __m512 s = _mm512_loadu_ps(table.sinValues + dim);
          cpu::store16(y + dim, _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
          cpu::store16(y + half + dim,
                       _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
        }
      }
      if (source != destination && rotaryDim < layout.headDim)
        std::memcpy(y + rotaryDim, x + rotaryDim,
                    sizeof(Element) * size_t(layout.headDim - rotaryDim));
    }
  }
}

/// Dimension-major heads (tokenStride 1): a dimension's values for all the
/// block's tokens are one contiguous row, so 16 tokens turn in one vector.
template <typename Element>
SPANC_AVX512 void
rotateLayerDimMajor(const KvBlockLayout &layout, const RopeRotation &rotation,
                    const OpTable &table, const Element *source,
                    Element *destination) {
  const int half = rotation.rotaryDim / 2;
  const int blockSize = layout.blockSize;
  for (int head = 0; head < layout.numKvHeads; ++head) {
    const Element *from = source + head * layout.headStride;
    Element *to = destination + head * layout.headStride;
    for (int pair = 0; pair < half; ++pair) {
      int first, second;
      pairDims(rotation, pair, first, second);
      __m512 c = _mm512_set1_ps(table.cosValues[first]);
      __m512 s = _mm512_set1_ps(table.sinValues[second]);
      const Element *rowA = from + first * layout.dimStride;
      const Element *rowB = from + second * layout.dimStride;
      Element *outA = to + first * layout.dimStride;
      Element *outB = to + second * layout.dimStride;
      for (int token = 0; token < blockSize; token += 16) {
        __mmask16 mask = blockSize - token >= 16
                             ? __mmask16(0xFFFF)
                             : __mmask16((1u << (blockSize - token)) - 1);
        __m512 a = cpu::load16(mask, rowA + token);
        __m512 b = cpu::load16(mask, rowB + token);
        cpu::store16(mask, outA + token,
                     _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
        cpu::store16(mask, outB + token,
                     _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
      }
    }
    if (source != destination)
      for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim)
        std::memcpy(to + dim * layout.dimStride, from + dim * layout.dimStride,
                    sizeof(Element) * size_t(blockSize));
  }
}

/// Dimension-major heads with 16-token blocks (KvStorage's K layout at the
/// default block size): one unmasked vector per dimension row, everything
/// the loop needs in registers.
template <typename Element>
SPANC_AVX512 void
rotateLayerDimMajor16(const KvBlockLayout &layout, const RopeRotation &rotation,
                      const OpTable &table, const Element *source,
                      Element *destination) {
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
    const Element *from = source + head * headStride;
    Element *to = destination + head * headStride;
#pragma GCC unroll 4
    for (int pair = 0; pair < half; ++pair) {
      const int64_t first = pair * firstStep;
      const int64_t second = first + secondOffset;
      const __m512 c = _mm512_set1_ps(cosValues[first]);
      const __m512 s = _mm512_set1_ps(sinValues[second]);
      const __m512 a = cpu::load16(from + first * dimStride);
      const __m512 b = cpu::load16(from + second * dimStride);
      cpu::store16(to + first * dimStride,
                   _mm512_fnmadd_ps(b, s, _mm512_mul_ps(a, c)));
      cpu::store16(to + second * dimStride,
                   _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
    }
    if (source != destination)
      for (int dim = rotation.rotaryDim; dim < layout.headDim; ++dim)
        std::memcpy(to + dim * dimStride, from + dim * dimStride,
                    sizeof(Element) * 16);
  }
}

/// Asks for `bytes` at `address` in the L2 cache (no fault, no wait).
inline void prefetchBlock(const char *address, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += 64)
    __builtin_prefetch(address + offset, 0, 2);
}

/// How many items ahead the K prefetch runs.
constexpr size_t PrefetchDistance = 2;

enum class Path { Scalar, TokenMajor, DimMajor, DimMajor16 };

/// Relocations of fewer blocks run on the calling thread.
constexpr size_t MinParallelOps = 8;
/// (op, layer) items a thread claims at a time: ~8 x 3..6 KiB of K, big
/// enough to keep the claiming overhead small, small enough that a helper
/// preempted mid-chunk holds the batch up only briefly.
constexpr int64_t ItemsPerChunk = 8;

Path choosePath(const KvBlockLayout &layout, const RopeRotation &rotation,
                bool allowVector) {
  if (!allowVector || !cpu::cpuFeatures().hasAvx512())
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

/// One (op, layer) item: K turned (or, for delta 0, copied) and, for a
/// duplicate, V copied.
template <typename Element>
void relocateItem(const KvBlockLayout &layout, const RopeRotation &rotation,
                  Path path, const OpTable &table, const RelocationOp &op,
                  void *keyLayer, void *valueLayer) {
  const size_t elementBytes = sizeof(Element);
  Element *keys = static_cast<Element *>(keyLayer);
  const Element *sourceKeys = keys + op.source * layout.blockStride;
  Element *destinationKeys = keys + op.destination * layout.blockStride;
  if (op.source != op.destination) {
    char *values = static_cast<char *>(valueLayer);
    copyHeads(layout, values + op.source * layout.blockStride * elementBytes,
              values + op.destination * layout.blockStride * elementBytes);
  }
  if (op.delta == 0) {
    // Turning by 0 is the identity; copying bits also keeps f16 exact.
    if (op.source != op.destination)
      copyHeads(layout, reinterpret_cast<const char *>(sourceKeys),
                reinterpret_cast<char *>(destinationKeys));
    return;
  }
  switch (path) {
  case Path::TokenMajor:
    rotateLayerTokenMajor(layout, rotation, table, sourceKeys, destinationKeys);
    break;
  case Path::DimMajor:
    rotateLayerDimMajor(layout, rotation, table, sourceKeys, destinationKeys);
    break;
  case Path::DimMajor16:
    rotateLayerDimMajor16(layout, rotation, table, sourceKeys, destinationKeys);
    break;
  case Path::Scalar:
    rotateLayerScalar(layout, rotation, table, sourceKeys, destinationKeys);
    break;
  }
}

/// What every item of one batch shares.
struct BatchContext {
  const KvBlockLayout &layout;
  const RopeRotation &rotation;
  Path path;
  bool half;
  int64_t elementBytes;
  void *const *keyLayers;
  void *const *valueLayers;
  llvm::ArrayRef<RelocationOp> ops;
  const int32_t *tableIndex;
  const float *tables;
};

/// Items [begin, end) of a batch. Layer-major: item = layer * numOps + op,
/// so consecutive items walk consecutive blocks of one layer's array (a
/// span's blocks are usually allocated together), one long stream for the
/// hardware prefetchers.
void relocateItems(void *opaque, int64_t begin, int64_t end) {
  const BatchContext &context = *static_cast<const BatchContext *>(opaque);
  const KvBlockLayout &layout = context.layout;
  const int64_t numOps = int64_t(context.ops.size());
  for (int64_t item = begin; item < end; ++item) {
    const size_t index = size_t(item % numOps);
    const int layer = int(item / numOps);
    const OpTable table = tableFor(context.rotation, context.tables,
                                   size_t(context.tableIndex[index]));
    // The K of the item PrefetchDistance ahead (usually a later block of
    // the same span and layer) into L2 while this one turns: from memory,
    // one item's loads alone keep too few cache lines in flight to reach
    // the bandwidth.
    if (index + PrefetchDistance < size_t(numOps))
      prefetchBlock(static_cast<const char *>(context.keyLayers[layer]) +
                        context.ops[index + PrefetchDistance].source *
                            layout.blockStride * context.elementBytes,
                    size_t(layout.blockStride * context.elementBytes));
    if (context.half)
      relocateItem<uint16_t>(layout, context.rotation, context.path, table,
                             context.ops[index], context.keyLayers[layer],
                             context.valueLayers[layer]);
    else
      relocateItem<float>(layout, context.rotation, context.path, table,
                          context.ops[index], context.keyLayers[layer],
                          context.valueLayers[layer]);
  }
}

void relocate(const KvBlockLayout &layout, const RopeRotation &rotation,
              void *const *keyLayers, void *const *valueLayers,
              llvm::ArrayRef<RelocationOp> ops, bool allowVector) {
  assert(rotation.rotaryDim % 2 == 0 && rotation.rotaryDim <= layout.headDim);
  if (ops.empty())
    return;
  // One table per distinct delta (all blocks of a relocated span share
  // theirs), outside every per-token loop and every parallel region.
  std::vector<int32_t> tableIndex(ops.size());
  std::vector<int64_t> deltas;
  for (size_t index = 0; index < ops.size(); ++index) {
    const int64_t delta = ops[index].delta;
    size_t found = deltas.size();
    if (!deltas.empty() && deltas.back() == delta)
      found = deltas.size() - 1;
    else
      for (size_t known = 0; known < deltas.size(); ++known)
        if (deltas[known] == delta) {
          found = known;
          break;
        }
    if (found == deltas.size())
      deltas.push_back(delta);
    tableIndex[index] = int32_t(found);
  }
  std::vector<float> tables(deltas.size() * 2 * size_t(rotation.rotaryDim));
  fillTables(rotation, deltas, tables.data());
  const Path path = choosePath(layout, rotation, allowVector);
  const bool half = layout.precision == KvPrecision::F16;
  const int64_t elementBytes = cpu::kvElementBytes(layout.precision);
  const int64_t numOps = int64_t(ops.size());
  const int64_t numItems = numOps * layout.numLayers;
  BatchContext context{layout,       rotation,     path,
                       half,         elementBytes, keyLayers,
                       valueLayers,  ops,          tableIndex.data(),
                       tables.data()};
  // A few blocks take microseconds on one thread; waking helpers costs
  // more than it saves there.
  if (ops.size() < MinParallelOps)
    relocateItems(&context, 0, numItems);
  else
    runSharedItems(numItems, ItemsPerChunk, relocateItems, &context);
}

} // namespace

void relocateBlocks(const KvBlockLayout &layout, const RopeRotation &rotation,
                    void *const *keyLayers, void *const *valueLayers,
                    llvm::ArrayRef<RelocationOp> ops) {
  relocate(layout, rotation, keyLayers, valueLayers, ops, true);
}

void relocateBlocksScalar(const KvBlockLayout &layout,
                          const RopeRotation &rotation, void *const *keyLayers,
                          void *const *valueLayers,
                          llvm::ArrayRef<RelocationOp> ops) {
  relocate(layout, rotation, keyLayers, valueLayers, ops, false);
}

bool relocationUsesAvx512(const KvBlockLayout &layout,
                          const RopeRotation &rotation) {
  return choosePath(layout, rotation, true) != Path::Scalar;
}

} // namespace spanc::cpu
