//===- RelocationMath.h - One unit of work of a ReRoPE relocation ---------===//
//
// A relocation item is one (op, layer, KV head) of a CIDRA batch; its work
// is cut into units a thread each: first the rotating pairs of every slot
// (turned by the op's delta, or copied for delta 0), then the
// non-rotating K dims and V (copied, for a duplicate only). relocateUnit is
// SPANC_HOST_DEVICE: the kernel runs it for every unit of every item, and
// a host test runs the same units over host memory against
// cpu::relocateBlocksScalar.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONMATH_H
#define SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONMATH_H

#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/KvMath.h"
#include "runtime/kernels/cuda/RelocationBatch.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// Units of one item: rotaryDim/2 pairs, headDim - rotaryDim tail dims and
/// headDim V dims, each for every slot of the block.
SPANC_HOST_DEVICE int64_t relocationUnits(int headDim, int rotaryDim,
                                          int blockSize) {
  return (int64_t(rotaryDim / 2) + (headDim - rotaryDim) + headDim) * blockSize;
}

/// Does unit `unit` of item (record, layer, head): `tables` holds the
/// batch's cos/sin tables (RelocationBatch::tables), K/V elements are
/// Element (float or half bits).
template <typename Element>
SPANC_HOST_DEVICE void
relocateUnit(const KvPoolView &pool, RopeOrder order, int rotaryDim,
             const RelocationRecord &record, const float *tables, int layer,
             int head, int64_t unit) {
  const int blockSize = pool.blockSize, headDim = pool.headDim;
  const int half = rotaryDim / 2;
  const int64_t layerOffset = int64_t(layer) * pool.layerStride;
  Element *keys = static_cast<Element *>(pool.keys) + layerOffset;
  const bool duplicate = record.source != record.destination;
  const int64_t pairUnits = int64_t(half) * blockSize;
  const int64_t tailUnits = int64_t(headDim - rotaryDim) * blockSize;
  if (unit < pairUnits) {
    const int pair = int(unit / blockSize), slot = int(unit % blockSize);
    int first, second;
    ropePairDims(order == RopeOrder::NeoX, rotaryDim, pair, first, second);
    const int64_t firstFrom =
        keyOffset(pool.blockStride, pool.headStride, blockSize, record.source,
                  head, slot, first);
    const int64_t secondFrom =
        keyOffset(pool.blockStride, pool.headStride, blockSize, record.source,
                  head, slot, second);
    const int64_t firstTo =
        keyOffset(pool.blockStride, pool.headStride, blockSize,
                  record.destination, head, slot, first);
    const int64_t secondTo =
        keyOffset(pool.blockStride, pool.headStride, blockSize,
                  record.destination, head, slot, second);
    if (record.table < 0) {
      // Delta 0: bits, nothing rounded.
      if (duplicate) {
        keys[firstTo] = keys[firstFrom];
        keys[secondTo] = keys[secondFrom];
      }
      return;
    }
    const float *cosValues = tables + int64_t(record.table) * rotaryDim;
    float a, b;
    rotatePair(loadKv(keys + firstFrom), loadKv(keys + secondFrom),
               cosValues[pair], cosValues[half + pair], a, b);
    storeKv(keys + firstTo, a);
    storeKv(keys + secondTo, b);
    return;
  }
  if (!duplicate)
    return;
  if (unit < pairUnits + tailUnits) {
    const int64_t index = unit - pairUnits;
    const int dim = rotaryDim + int(index / blockSize);
    const int slot = int(index % blockSize);
    keys[keyOffset(pool.blockStride, pool.headStride, blockSize,
                   record.destination, head, slot, dim)] =
        keys[keyOffset(pool.blockStride, pool.headStride, blockSize,
                       record.source, head, slot, dim)];
    return;
  }
  // V: one head is headDim * blockSize contiguous elements.
  const int64_t index = unit - pairUnits - tailUnits;
  Element *values = static_cast<Element *>(pool.values) + layerOffset;
  const int64_t headOffset = int64_t(head) * pool.headStride + index;
  values[int64_t(record.destination) * pool.blockStride + headOffset] =
      values[int64_t(record.source) * pool.blockStride + headOffset];
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_RELOCATIONMATH_H
