//===- AttentionScalar.cpp - The portable attention tile step -------------===//
//
// Any block size and head dim, every product in f32 with loads converted
// element by element: the reference the AVX2, AVX-512 and AMX paths are
// tested against (AttentionTest), and the path of CPUs without AVX2.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/AttentionInternal.h"

#include <algorithm>
#include <cmath>

namespace spanc::cpu::attention {

namespace {

/// Copies the block's K for one head into `out` as f32 (same
/// dimension-major layout) with each valid slot rotated to its logical
/// index (rope-in-kernel); the scalar reference.
template <typename Element>
void rotateKeyBlockScalar(const CallContext &context, const Element *keyBlock,
                          int valid, int64_t logicalStart, float *out) {
  const PagedKvView &kv = *context.kv;
  const RopeTable &table = *context.options->keyRope;
  const int64_t count = int64_t(context.shape->headDim) * kv.blockSize;
  for (int64_t index = 0; index < count; ++index)
    out[index] = loadElement(keyBlock + index);
  for (int slot = 0; slot < valid; ++slot)
    rotateHead(table.config().order, table.config().rotaryDim,
               table.row(logicalStart + slot), out + slot, kv.blockSize);
}

/// The scalar tile step: folds one block's keys into the tile state.
template <typename KeyElement, typename ValueElement>
void foldBlockScalar(const CallContext &context, TileState &tile,
                     const KeyElement *keyBlock, const ValueElement *valueBlock,
                     int valid, int64_t logicalStart) {
  const int headDim = context.shape->headDim;
  const int blockSize = context.kv->blockSize;
  float scores[kernels::kMaxBlockSize];
  for (int row = 0; row < tile.rows; ++row) {
    int64_t count =
        std::min<int64_t>(valid, tile.limit[row] - logicalStart + 1);
    if (count <= 0)
      continue;
    const float *query = tile.query + row * headDim;
    float blockMax = kNegativeInfinity;
    for (int slot = 0; slot < count; ++slot) {
      float dot = 0;
      for (int dim = 0; dim < headDim; ++dim)
        dot += query[dim] * loadElement(keyBlock + dim * blockSize + slot);
      scores[slot] = dot;
      blockMax = std::max(blockMax, dot);
    }
    float newMax = std::max(tile.maxScore[row], blockMax);
    float correction = std::exp(tile.maxScore[row] - newMax);
    float *accumulator = tile.accumulator + row * headDim;
    for (int dim = 0; dim < headDim; ++dim)
      accumulator[dim] *= correction;
    float blockSum = 0;
    for (int slot = 0; slot < count; ++slot) {
      float weight = std::exp(scores[slot] - newMax);
      blockSum += weight;
      const ValueElement *value = valueBlock + slot * headDim;
      for (int dim = 0; dim < headDim; ++dim)
        accumulator[dim] += weight * loadElement(value + dim);
    }
    tile.sum[row] = tile.sum[row] * correction + blockSum;
    tile.maxScore[row] = newMax;
  }
}

} // namespace

template <typename Element>
void foldPagesScalar(const CallContext &context, const AttentionWorkItem &item,
                     TileState &tile) {
  const PagedAttentionBatch &batch = *context.batch;
  const PagedKvView &kv = *context.kv;
  const int64_t lastLimit = tile.limit[tile.rows - 1];
  alignas(64) float rotatedKeys[kernels::kMaxHeadDim * kernels::kMaxBlockSize];
  for (int32_t page = item.pageBegin; page < item.pageEnd; ++page) {
    int valid = batch.validTokens[page];
    int64_t logicalStart = context.pageStarts[page];
    if (logicalStart > lastLimit)
      break;
    if (valid == 0)
      continue;
    int64_t block = batch.blockIds[page];
    const int64_t offset = block * kv.blockStride + item.kvHead * kv.headStride;
    const Element *keyBlock = static_cast<const Element *>(kv.keys) + offset;
    const Element *valueBlock =
        static_cast<const Element *>(kv.values) + offset;
    if (context.options->keyRope) {
      rotateKeyBlockScalar(context, keyBlock, valid, logicalStart, rotatedKeys);
      foldBlockScalar(context, tile, static_cast<const float *>(rotatedKeys),
                      valueBlock, valid, logicalStart);
    } else {
      foldBlockScalar(context, tile, keyBlock, valueBlock, valid, logicalStart);
    }
  }
}

template void foldPagesScalar<float>(const CallContext &,
                                     const AttentionWorkItem &, TileState &);
template void foldPagesScalar<uint16_t>(const CallContext &,
                                        const AttentionWorkItem &, TileState &);

} // namespace spanc::cpu::attention
