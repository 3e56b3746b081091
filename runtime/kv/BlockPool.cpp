//===- BlockPool.cpp - Fixed pool of KV cache blocks with an LRU hash index
//===//

#include "runtime/kv/BlockPool.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ErrorHandling.h"

#include <limits>

namespace spanc::kv {

llvm::Expected<uint32_t> parseKvCacheCapacity(llvm::StringRef text,
                                              unsigned blockSize,
                                              uint64_t bytesPerBlock) {
  llvm::StringRef trimmed = text.trim();
  llvm::StringRef digits = trimmed.take_while(llvm::isDigit);
  llvm::StringRef unit = trimmed.drop_front(digits.size()).trim();
  uint64_t amount = 0;
  if (digits.empty() || digits.getAsInteger(10, amount))
    return llvm::createStringError(
        std::errc::invalid_argument,
        "--kv-cache '%s': expected a number of tokens (e.g. 8192) or a size "
        "(e.g. 256MiB)",
        text.str().c_str());
  uint64_t blocks = 0;
  if (unit.empty() || unit.equals_insensitive("tok") ||
      unit.equals_insensitive("tokens")) {
    if (blockSize == 0)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "--kv-cache: block size is 0");
    blocks = amount / blockSize;
  } else {
    uint64_t scale = 0;
    if (unit.equals_insensitive("kib") || unit.equals_insensitive("k"))
      scale = uint64_t(1) << 10;
    else if (unit.equals_insensitive("mib") || unit.equals_insensitive("m"))
      scale = uint64_t(1) << 20;
    else if (unit.equals_insensitive("gib") || unit.equals_insensitive("g"))
      scale = uint64_t(1) << 30;
    else
      return llvm::createStringError(
          std::errc::invalid_argument,
          "--kv-cache '%s': unknown unit '%s' (use tok, KiB, MiB or GiB)",
          text.str().c_str(), unit.str().c_str());
    if (bytesPerBlock == 0)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "--kv-cache: block byte size is 0");
    if (amount > std::numeric_limits<uint64_t>::max() / scale)
      return llvm::createStringError(std::errc::value_too_large,
                                     "--kv-cache '%s': too large",
                                     text.str().c_str());
    blocks = amount * scale / bytesPerBlock;
  }
  if (blocks == 0)
    return llvm::createStringError(
        std::errc::invalid_argument,
        "--kv-cache '%s' holds no whole block (%u tokens, %llu bytes each)",
        text.str().c_str(), blockSize,
        static_cast<unsigned long long>(bytesPerBlock));
  if (blocks >= InvalidBlock)
    return llvm::createStringError(std::errc::value_too_large,
                                   "--kv-cache '%s': more than 2^32 blocks",
                                   text.str().c_str());
  return uint32_t(blocks);
}

BlockPool::BlockPool(uint32_t numBlocks, unsigned blockSize)
    : blockSize_(blockSize), next_(size_t(numBlocks) + 1),
      previous_(size_t(numBlocks) + 1), refCounts_(numBlocks, 0),
      cached_(numBlocks, 0), hashes_(numBlocks), storedPositions_(numBlocks, 0),
      numTokens_(numBlocks, 0) {
  const uint32_t sentinel = numBlocks;
  next_[sentinel] = previous_[sentinel] = sentinel;
  for (BlockId block = 0; block < numBlocks; ++block)
    pushBack(block);
}

void BlockPool::unlink(BlockId block) {
  next_[previous_[block]] = next_[block];
  previous_[next_[block]] = previous_[block];
  next_[block] = previous_[block] = block;
  --numFree_;
}

void BlockPool::pushFront(BlockId block) {
  const uint32_t sentinel = numBlocks();
  next_[block] = next_[sentinel];
  previous_[block] = sentinel;
  previous_[next_[sentinel]] = block;
  next_[sentinel] = block;
  ++numFree_;
}

void BlockPool::pushBack(BlockId block) {
  const uint32_t sentinel = numBlocks();
  previous_[block] = previous_[sentinel];
  next_[block] = sentinel;
  next_[previous_[sentinel]] = block;
  previous_[sentinel] = block;
  ++numFree_;
}

llvm::Expected<llvm::SmallVector<BlockId, 16>>
BlockPool::allocate(uint32_t count) {
  if (count > numFree_)
    return llvm::createStringError(
        std::errc::not_enough_memory,
        "KV cache full: need %u blocks, %u free of %u (%u held by running "
        "requests)",
        count, numFree_, numBlocks(), numBlocks() - numFree_);
  llvm::SmallVector<BlockId, 16> blocks;
  blocks.reserve(count);
  const uint32_t sentinel = numBlocks();
  for (uint32_t i = 0; i < count; ++i) {
    BlockId block = next_[sentinel];
    unlink(block);
    if (cached_[block]) {
      if (eventSink_)
        eventSink_->blockRemoved(hashes_[block]);
      index_.erase(hashes_[block]);
      cached_[block] = 0;
      hashes_[block] = BlockHash();
      ++numEvictions_;
    }
    refCounts_[block] = 1;
    storedPositions_[block] = 0;
    numTokens_[block] = 0;
    blocks.push_back(block);
  }
  return blocks;
}

void BlockPool::touch(llvm::ArrayRef<BlockId> blocks) {
  for (BlockId block : blocks) {
    if (refCounts_[block]++ == 0)
      unlink(block);
  }
}

void BlockPool::free(llvm::ArrayRef<BlockId> blocks) {
  for (BlockId block : blocks) {
    if (refCounts_[block] == 0)
      llvm::report_fatal_error("BlockPool::free: block " + llvm::Twine(block) +
                               " has no reference");
    if (--refCounts_[block] != 0)
      continue;
    if (cached_[block])
      pushBack(block);
    else
      pushFront(block);
  }
}

bool BlockPool::cacheBlock(BlockId block, const BlockHash &hash) {
  if (cached_[block])
    return hashes_[block] == hash;
  if (!index_.try_emplace(hash, block).second)
    return false;
  cached_[block] = 1;
  hashes_[block] = hash;
  return true;
}

void BlockPool::uncache(BlockId block) {
  if (!cached_[block])
    return;
  if (eventSink_)
    eventSink_->blockRemoved(hashes_[block]);
  index_.erase(hashes_[block]);
  cached_[block] = 0;
  hashes_[block] = BlockHash();
  // An unreferenced block that lost its hash is worth nothing: reuse first.
  if (refCounts_[block] == 0) {
    unlink(block);
    pushFront(block);
  }
}

std::optional<BlockId> BlockPool::lookup(const BlockHash &hash) const {
  auto found = index_.find(hash);
  if (found == index_.end())
    return std::nullopt;
  return found->second;
}

llvm::Error BlockPool::verify() const {
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(std::errc::state_not_recoverable, "%s",
                                   message.str().c_str());
  };
  const uint32_t sentinel = numBlocks();
  std::vector<uint8_t> listed(numBlocks(), 0);
  uint32_t listedCount = 0;
  uint32_t previous = sentinel;
  for (uint32_t block = next_[sentinel]; block != sentinel;
       block = next_[block]) {
    if (block > sentinel || listed[block])
      return fail("free list is not a simple ring at block " +
                  llvm::Twine(block));
    if (previous_[block] != previous)
      return fail("free list back link broken at block " + llvm::Twine(block));
    if (refCounts_[block] != 0)
      return fail("referenced block " + llvm::Twine(block) +
                  " is on the free list");
    listed[block] = 1;
    ++listedCount;
    previous = block;
  }
  if (listedCount != numFree_)
    return fail("free count " + llvm::Twine(numFree_) + " but " +
                llvm::Twine(listedCount) + " blocks listed");
  uint32_t cachedCount = 0;
  for (BlockId block = 0; block < numBlocks(); ++block) {
    if (refCounts_[block] == 0 && !listed[block])
      return fail("unreferenced block " + llvm::Twine(block) +
                  " is not on the free list");
    if (!cached_[block])
      continue;
    ++cachedCount;
    auto found = index_.find(hashes_[block]);
    if (found == index_.end() || found->second != block)
      return fail("cached block " + llvm::Twine(block) + " is not indexed");
  }
  if (cachedCount != index_.size())
    return fail("index holds " + llvm::Twine(index_.size()) + " hashes but " +
                llvm::Twine(cachedCount) + " blocks are cached");
  return llvm::Error::success();
}

} // namespace spanc::kv
