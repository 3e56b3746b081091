//===- KvStorage.h - Physical K/V memory in fixed-size blocks -------------===//
//
// The memory half of the paged KV cache: numBlocks blocks of blockSize token
// slots, each holding K and V of every layer and KV head. Which block
// belongs to which request, hashing and eviction live in the block pool
// (runtime/kv, elsewhere); this class only owns the bytes and their layout.
//
// Elements are IEEE half by default (KvPrecision::F16, as llama.cpp's
// default cache): writes round to nearest even, every reader converts on the
// fly, so attention, relocation and copy-on-write move half the bytes of
// f32. F32 storage remains for exact-K checks (ModelOptions::halfPrecisionKv
// = false, the "f32 paths").
//
// Layout, per layer, K and V in separate arrays:
//   K: [block][kvHead][headDim][slot]  (dimension-major inside a block, so
//       the attention kernel scores 16 slots with one vector per dimension)
//   V: [block][kvHead][slot][headDim]  (slot-major, a value row per token)
// A block of one layer and head is headDim * blockSize contiguous elements
// in both arrays. Attention reads K/V only through page lists (block ids +
// the number of valid leading slots per block); a contiguous sequence is
// one page list of consecutive blocks.
//
// K is stored either already rotated by RoPE at the position it was written
// with (keysRotated; relocating a span then means rotating its K by the
// position delta) or unrotated, with the attention kernel applying RoPE at
// each key's logical index (rope-in-kernel).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CPU_KVSTORAGE_H
#define SPANC_RUNTIME_BACKEND_CPU_KVSTORAGE_H

#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/Half.h"

#include "llvm/Support/Error.h"

#include <cassert>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace spanc::backend {

struct KvStorageConfig {
  int numLayers = 0;
  int numKvHeads = 0;
  int headDim = 0;
  int blockSize = 16;
  int64_t numBlocks = 0;
  /// true: K is stored rotated at its write position; false: unrotated,
  /// and attention applies RoPE at the logical index (rope-in-kernel).
  bool keysRotated = true;
  /// How elements are stored (f16 unless exact f32 K/V is asked for).
  cpu::KvPrecision precision = cpu::KvPrecision::F16;
  /// Write every page once at creation: the pool's page faults are paid
  /// at startup instead of by the first requests that write there (on a
  /// VM whose memory the host backs lazily, ~3 ms a MiB with huge pages),
  /// and the pool counts in RSS from then on.
  bool prefault = false;
};

class KvStorage {
public:
  /// Reserves the memory (anonymous mmap: pages are zero and cost no RSS
  /// until written, unless `prefault`). Fails on a zero or inconsistent
  /// shape or when the memory cannot be mapped.
  static llvm::Expected<std::unique_ptr<KvStorage>>
  create(const KvStorageConfig &config);
  ~KvStorage();
  KvStorage(const KvStorage &) = delete;
  KvStorage &operator=(const KvStorage &) = delete;

  const KvStorageConfig &config() const { return config_; }
  int blockSize() const { return config_.blockSize; }
  int64_t numBlocks() const { return config_.numBlocks; }
  bool keysRotated() const { return config_.keysRotated; }

  cpu::KvPrecision precision() const { return config_.precision; }
  int elementBytes() const { return cpu::kvElementBytes(config_.precision); }

  /// Elements of one (block, layer, head) in K (and in V): headDim *
  /// blockSize.
  int64_t headStride() const { return headStride_; }
  /// Elements between consecutive blocks of one layer in K (and in V).
  int64_t blockStride() const { return blockStride_; }
  /// Within a K block of one head, element (slot, dim) is at
  /// dim * keyDimStride() + slot * keySlotStride().
  int64_t keyDimStride() const { return config_.blockSize; }
  static constexpr int64_t keySlotStride() { return 1; }
  /// Within a V block of one head, element (slot, dim) is at
  /// slot * valueSlotStride() + dim.
  int64_t valueSlotStride() const { return config_.headDim; }

  /// K of one block, layer and KV head (headStride() elements,
  /// dimension-major), as raw storage.
  void *keyData(int layer, int64_t block, int kvHead) {
    return memory_ + (layerOffset(layer, false) + block * blockStride_ +
                      kvHead * headStride_) *
                         elementBytes();
  }
  /// V of one block, layer and KV head (headStride() elements, slot-major).
  void *valueData(int layer, int64_t block, int kvHead) {
    return memory_ + (layerOffset(layer, true) + block * blockStride_ +
                      kvHead * headStride_) *
                         elementBytes();
  }
  /// The same typed: Element must be float for F32 storage, uint16_t
  /// (IEEE half bits) for F16.
  template <typename Element>
  Element *keys(int layer, int64_t block, int kvHead) {
    checkElement<Element>();
    return static_cast<Element *>(keyData(layer, block, kvHead));
  }
  template <typename Element>
  Element *values(int layer, int64_t block, int kvHead) {
    checkElement<Element>();
    return static_cast<Element *>(valueData(layer, block, kvHead));
  }

  /// One element as float (tests and tools; not for per-token loops).
  float key(int layer, int64_t block, int kvHead, int slot, int dim) const;
  float value(int layer, int64_t block, int kvHead, int slot, int dim) const;

  /// Stores one token's K and V of one layer ([numKvHeads][headDim] f32
  /// each) into `slot` of `block`, rounding to the storage precision.
  void writeToken(int layer, int64_t block, int slot, const float *key,
                  const float *value);

  /// Stores K and V of `count` tokens of one layer: token t's K is the
  /// [numKvHeads][headDim] floats at keys + t * rowStride (V likewise at
  /// values + t * rowStride) and goes to slot slotIndices[t] of block
  /// slotBlocks[t]. Runs of consecutive slots of one block are transposed
  /// into K's dimension-major layout 16 at a time (AVX-512 where present).
  void writeTokens(int layer, int64_t count, const int32_t *slotBlocks,
                   const int32_t *slotIndices, const float *keys,
                   const float *values, int64_t rowStride);

  /// Per token of the first `numTokens` slots: the squared distance between
  /// the K and V rows (every KV head) of one layer in blocks `a` and `b`,
  /// into out[0, numTokens). How far a blend moved a token (sched::
  /// BlendTask): both blocks must hold K at the same position.
  void tokenDistances(int layer, int64_t a, int64_t b, int numTokens,
                      float *out) const;

  /// Copies every layer's K and V of block `source` into `destination`.
  void copyBlock(int64_t source, int64_t destination);

  /// The view the attention kernel reads for one layer.
  cpu::PagedKvView layerView(int layer) const;

  /// Bytes reserved.
  int64_t sizeInBytes() const { return sizeInBytes_; }

private:
  explicit KvStorage(const KvStorageConfig &config);
  /// Element offset of a layer's K (or V) array.
  int64_t layerOffset(int layer, bool valuesArray) const {
    return (int64_t(layer) * 2 + (valuesArray ? 1 : 0)) * layerStride_;
  }
  template <typename Element> void checkElement() const {
    static_assert(std::is_same_v<Element, float> ||
                      std::is_same_v<Element, uint16_t>,
                  "K/V elements are float (F32) or uint16_t (F16)");
    assert(sizeof(Element) == size_t(elementBytes()) &&
           "element type does not match the storage precision");
  }

  KvStorageConfig config_;
  int64_t headStride_ = 0;
  int64_t blockStride_ = 0;
  int64_t layerStride_ = 0;
  int64_t sizeInBytes_ = 0;
  char *memory_ = nullptr;
  std::vector<int64_t> runStarts_; ///< writeTokens' scratch, reused
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPU_KVSTORAGE_H
