//===- BlockPool.h - Fixed pool of KV cache blocks with an LRU hash index -===//
//
// The pool owns block ids only (the K/V bytes live in KvStorage): reference
// counts, a hash -> block index of cached blocks, and one intrusive doubly
// linked free list in which unreferenced cached blocks wait, least recently
// used first, to be evicted. Every operation is O(1) per block. Allocation
// is all-or-nothing: when fewer blocks are free than asked for, it fails with
// the reason and changes nothing, so referenced blocks are never touched.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_BLOCKPOOL_H
#define SPANC_RUNTIME_KV_BLOCKPOOL_H

#include "runtime/kv/BlockHash.h"
#include "runtime/kv/KvEventSink.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace spanc::kv {

using BlockId = uint32_t;
constexpr BlockId InvalidBlock = ~BlockId(0);

/// The number of blocks a `--kv-cache` capacity gives: "4096" or "4096tok"
/// (tokens, rounded down to whole blocks), "256MiB" / "1GiB" / "512KiB"
/// (bytes / `bytesPerBlock`, the size of one block's K and V for all
/// layers). Fails, naming the text, when it is malformed or yields no block.
llvm::Expected<uint32_t> parseKvCacheCapacity(llvm::StringRef text,
                                              unsigned blockSize,
                                              uint64_t bytesPerBlock);

class BlockPool {
public:
  BlockPool(uint32_t numBlocks, unsigned blockSize);

  uint32_t numBlocks() const { return uint32_t(refCounts_.size()); }
  unsigned blockSize() const { return blockSize_; }
  /// Blocks no request references: allocatable (cached ones by eviction).
  uint32_t numFreeBlocks() const { return numFree_; }
  /// Blocks in the hash index, referenced or not.
  uint32_t numCachedBlocks() const { return uint32_t(index_.size()); }
  /// Cached blocks evicted so far to satisfy allocations.
  uint64_t numEvictions() const { return numEvictions_; }

  /// `count` blocks with reference count 1, no hash, 0 valid tokens, stored
  /// position 0. Takes never-cached blocks first, then evicts the least
  /// recently used unreferenced cached blocks. Fails (changing nothing) when
  /// fewer than `count` blocks are unreferenced.
  llvm::Expected<llvm::SmallVector<BlockId, 16>> allocate(uint32_t count);

  /// Adds a reference to each block (a cache hit); an unreferenced cached
  /// block leaves the eviction list.
  void touch(llvm::ArrayRef<BlockId> blocks);

  /// Drops a reference from each block, in order. A block that reaches zero
  /// stays cached and becomes the most recently used eviction candidate; an
  /// uncached one is reused first. Free a request's blocks last-to-first so
  /// its tail is evicted before its shared head.
  void free(llvm::ArrayRef<BlockId> blocks);

  /// Enters a referenced block into the index under `hash`. Returns false
  /// (and leaves the block uncached) when another block already holds that
  /// hash, or the block is already cached under another hash.
  bool cacheBlock(BlockId block, const BlockHash &hash);

  /// Removes a block from the index (its contents are about to change).
  void uncache(BlockId block);

  /// The cached block holding `hash`, if any. Does not add a reference.
  std::optional<BlockId> lookup(const BlockHash &hash) const;

  uint32_t refCount(BlockId block) const { return refCounts_[block]; }
  bool isCached(BlockId block) const { return cached_[block]; }
  const BlockHash &hash(BlockId block) const { return hashes_[block]; }

  /// The logical position of the block's first token as its stored K is
  /// rotated now (rerope); a reuse at this position needs no relocation.
  int64_t storedPosition(BlockId block) const {
    return storedPositions_[block];
  }
  void setStoredPosition(BlockId block, int64_t position) {
    storedPositions_[block] = position;
  }
  /// How many leading slots of the block hold valid K/V.
  unsigned numTokens(BlockId block) const { return numTokens_[block]; }
  void setNumTokens(BlockId block, unsigned count) {
    numTokens_[block] = count;
  }

  /// Reports every hash leaving the index to `sink` (null: none). Blocks
  /// entering it are reported by their client (KvCacheManager), which
  /// knows their tokens and context.
  void setEventSink(KvEventSink *sink) { eventSink_ = sink; }
  KvEventSink *eventSink() const { return eventSink_; }

  /// Checks every invariant (list links, counts, index agreement); for tests.
  llvm::Error verify() const;

private:
  void unlink(BlockId block);
  void pushFront(BlockId block);
  void pushBack(BlockId block);

  unsigned blockSize_;
  // Free list links; index numBlocks() is the sentinel of the ring.
  std::vector<uint32_t> next_;
  std::vector<uint32_t> previous_;
  std::vector<uint32_t> refCounts_;
  std::vector<uint8_t> cached_;
  std::vector<BlockHash> hashes_;
  std::vector<int64_t> storedPositions_;
  std::vector<uint32_t> numTokens_;
  llvm::DenseMap<BlockHash, BlockId> index_;
  uint32_t numFree_ = 0;
  uint64_t numEvictions_ = 0;
  KvEventSink *eventSink_ = nullptr;
};

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_BLOCKPOOL_H
