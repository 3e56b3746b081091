//===- KvStorage.h - Physical K/V memory in fixed-size blocks -------------===//
//
// The memory half of the paged KV cache: numBlocks blocks of blockSize token
// slots, each holding K and V of every layer and KV head (f32). Which block
// belongs to which request, hashing and eviction live in the block pool
// (runtime/kv, elsewhere); this class only owns the bytes and their layout.
//
// Layout, per layer, K and V in separate arrays:
//   K: [block][kvHead][headDim][slot]  (dimension-major inside a block, so
//       the attention kernel scores 16 slots with one vector per dimension)
//   V: [block][kvHead][slot][headDim]  (slot-major, a value row per token)
// A block of one layer and head is headDim * blockSize contiguous floats in
// both arrays. Attention reads K/V only through page lists (block ids + the
// number of valid leading slots per block); a contiguous sequence is one
// page list of consecutive blocks.
//
// K is stored either already rotated by RoPE at the position it was written
// with (keysRotated, the default; relocating a span then means rotating its
// K by the position delta) or unrotated, with the attention kernel applying
// RoPE at each key's logical index (rope-in-kernel).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_KVSTORAGE_H
#define SPANC_RUNTIME_KV_KVSTORAGE_H

#include "runtime/kernels/cpu/Attention.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>

namespace spanc::kv {

struct KvStorageConfig {
  int numLayers = 0;
  int numKvHeads = 0;
  int headDim = 0;
  int blockSize = 16;
  int64_t numBlocks = 0;
  /// true: K is stored rotated at its write position; false: unrotated,
  /// and attention applies RoPE at the logical index (rope-in-kernel).
  bool keysRotated = true;
};

class KvStorage {
public:
  /// Reserves the memory (anonymous mmap: pages are zero and cost no RSS
  /// until written). Fails on a zero or inconsistent shape or when the
  /// memory cannot be mapped.
  static llvm::Expected<std::unique_ptr<KvStorage>>
  create(const KvStorageConfig &config);
  ~KvStorage();
  KvStorage(const KvStorage &) = delete;
  KvStorage &operator=(const KvStorage &) = delete;

  const KvStorageConfig &config() const { return config_; }
  int blockSize() const { return config_.blockSize; }
  int64_t numBlocks() const { return config_.numBlocks; }
  bool keysRotated() const { return config_.keysRotated; }

  /// Floats of one (block, layer, head) in K (and in V): headDim * blockSize.
  int64_t headStride() const { return headStride_; }
  /// Floats between consecutive blocks of one layer in K (and in V).
  int64_t blockStride() const { return blockStride_; }
  /// Within a K block of one head, element (slot, dim) is at
  /// dim * keyDimStride() + slot * keySlotStride().
  int64_t keyDimStride() const { return config_.blockSize; }
  static constexpr int64_t keySlotStride() { return 1; }
  /// Within a V block of one head, element (slot, dim) is at
  /// slot * valueSlotStride() + dim.
  int64_t valueSlotStride() const { return config_.headDim; }

  /// K of one block, layer and KV head (headStride() floats, dimension-major).
  float *keys(int layer, int64_t block, int kvHead) {
    return memory_ + layerOffset(layer, false) + block * blockStride_ +
           kvHead * headStride_;
  }
  const float *keys(int layer, int64_t block, int kvHead) const {
    return const_cast<KvStorage *>(this)->keys(layer, block, kvHead);
  }
  /// V of one block, layer and KV head (headStride() floats, slot-major).
  float *values(int layer, int64_t block, int kvHead) {
    return memory_ + layerOffset(layer, true) + block * blockStride_ +
           kvHead * headStride_;
  }
  const float *values(int layer, int64_t block, int kvHead) const {
    return const_cast<KvStorage *>(this)->values(layer, block, kvHead);
  }

  /// Stores one token's K and V of one layer ([numKvHeads][headDim] each)
  /// into `slot` of `block`.
  void writeToken(int layer, int64_t block, int slot, const float *key,
                  const float *value);

  /// Copies every layer's K and V of block `source` into `destination` (the
  /// duplication step of CIDRA relocation).
  void copyBlock(int64_t source, int64_t destination);

  /// The view the attention kernel reads for one layer.
  cpu::PagedKvView layerView(int layer) const;

  /// Bytes reserved.
  int64_t sizeInBytes() const { return sizeInBytes_; }

private:
  explicit KvStorage(const KvStorageConfig &config);
  int64_t layerOffset(int layer, bool valuesArray) const {
    return (int64_t(layer) * 2 + (valuesArray ? 1 : 0)) * layerStride_;
  }

  KvStorageConfig config_;
  int64_t headStride_ = 0;
  int64_t blockStride_ = 0;
  int64_t layerStride_ = 0;
  int64_t sizeInBytes_ = 0;
  float *memory_ = nullptr;
};

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_KVSTORAGE_H
