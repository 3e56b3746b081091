//===- BlockPoolTest.cpp - Block pool: refcounts, index, LRU eviction -----===//

#include "runtime/kv/BlockPool.h"

#include <gtest/gtest.h>

#include <random>

using namespace spanc::kv;

namespace {

BlockHash hashOf(uint64_t value) {
  return {value * 0x9E3779B97F4A7C15ULL, value};
}

#define ASSERT_POOL_OK(pool)                                                   \
  do {                                                                         \
    llvm::Error error = (pool).verify();                                       \
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));             \
  } while (0)

TEST(BlockPool, AllocatesDistinctBlocksWithOneReference) {
  BlockPool pool(8, 16);
  auto blocks = pool.allocate(5);
  ASSERT_TRUE(bool(blocks)) << llvm::toString(blocks.takeError());
  ASSERT_EQ(blocks->size(), 5u);
  llvm::SmallVector<BlockId, 8> sorted(blocks->begin(), blocks->end());
  llvm::sort(sorted);
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (BlockId block : *blocks)
    EXPECT_EQ(pool.refCount(block), 1u);
  EXPECT_EQ(pool.numFreeBlocks(), 3u);
  ASSERT_POOL_OK(pool);
}

TEST(BlockPool, FailsCleanlyWhenNothingCanBeEvicted) {
  BlockPool pool(4, 16);
  auto held = pool.allocate(3);
  ASSERT_TRUE(bool(held));
  pool.setNumTokens((*held)[0], 16);
  ASSERT_TRUE(pool.cacheBlock((*held)[0], hashOf(1)));
  auto tooMany = pool.allocate(2);
  ASSERT_FALSE(bool(tooMany));
  std::string message = llvm::toString(tooMany.takeError());
  EXPECT_NE(message.find("need 2 blocks, 1 free of 4"), std::string::npos)
      << message;
  // Nothing changed: the referenced blocks keep their state.
  EXPECT_EQ(pool.numFreeBlocks(), 1u);
  for (BlockId block : *held)
    EXPECT_EQ(pool.refCount(block), 1u);
  EXPECT_EQ(pool.lookup(hashOf(1)), (*held)[0]);
  EXPECT_EQ(pool.numTokens((*held)[0]), 16u);
  ASSERT_POOL_OK(pool);
}

TEST(BlockPool, EvictsLeastRecentlyUsedUnreferencedBlock) {
  BlockPool pool(3, 16);
  auto blocks = pool.allocate(3);
  ASSERT_TRUE(bool(blocks));
  BlockId a = (*blocks)[0], b = (*blocks)[1], c = (*blocks)[2];
  ASSERT_TRUE(pool.cacheBlock(a, hashOf(10)));
  ASSERT_TRUE(pool.cacheBlock(b, hashOf(11)));
  ASSERT_TRUE(pool.cacheBlock(c, hashOf(12)));
  // Freed in the order b, a, c: b is the least recently used.
  pool.free({b});
  pool.free({a});
  pool.free({c});
  // A hit on b makes it the most recently used once freed again.
  pool.touch({b});
  pool.free({b});
  auto first = pool.allocate(1);
  ASSERT_TRUE(bool(first));
  EXPECT_EQ((*first)[0], a);
  EXPECT_FALSE(pool.lookup(hashOf(10)));
  EXPECT_EQ(pool.lookup(hashOf(11)), b);
  EXPECT_EQ(pool.lookup(hashOf(12)), c);
  auto second = pool.allocate(1);
  ASSERT_TRUE(bool(second));
  EXPECT_EQ((*second)[0], c);
  EXPECT_EQ(pool.numEvictions(), 2u);
  EXPECT_FALSE(pool.isCached(c));
  ASSERT_POOL_OK(pool);
}

TEST(BlockPool, UncachedFreedBlocksAreReusedBeforeCachedOnes) {
  BlockPool pool(2, 16);
  auto blocks = pool.allocate(2);
  ASSERT_TRUE(bool(blocks));
  ASSERT_TRUE(pool.cacheBlock((*blocks)[0], hashOf(5)));
  pool.free({(*blocks)[0]});
  pool.free({(*blocks)[1]}); // uncached: worthless, reused first
  auto next = pool.allocate(1);
  ASSERT_TRUE(bool(next));
  EXPECT_EQ((*next)[0], (*blocks)[1]);
  EXPECT_EQ(pool.lookup(hashOf(5)), (*blocks)[0]);
  EXPECT_EQ(pool.numEvictions(), 0u);
}

TEST(BlockPool, TouchRevivesACachedFreeBlock) {
  BlockPool pool(2, 16);
  auto blocks = pool.allocate(1);
  ASSERT_TRUE(bool(blocks));
  BlockId block = (*blocks)[0];
  pool.setStoredPosition(block, 48);
  pool.setNumTokens(block, 7);
  ASSERT_TRUE(pool.cacheBlock(block, hashOf(3)));
  pool.free({block});
  EXPECT_EQ(pool.numFreeBlocks(), 2u);
  auto hit = pool.lookup(hashOf(3));
  ASSERT_TRUE(hit.has_value());
  pool.touch({*hit, *hit});
  EXPECT_EQ(pool.refCount(block), 2u);
  EXPECT_EQ(pool.numFreeBlocks(), 1u);
  // Its metadata survived the time on the free list.
  EXPECT_EQ(pool.storedPosition(block), 48);
  EXPECT_EQ(pool.numTokens(block), 7u);
  // Referenced: an allocation can only take the other block.
  auto both = pool.allocate(2);
  EXPECT_FALSE(bool(both));
  llvm::consumeError(both.takeError());
  ASSERT_POOL_OK(pool);
}

TEST(BlockPool, IndexHoldsOneBlockPerHash) {
  BlockPool pool(3, 16);
  auto blocks = pool.allocate(2);
  ASSERT_TRUE(bool(blocks));
  EXPECT_TRUE(pool.cacheBlock((*blocks)[0], hashOf(9)));
  EXPECT_FALSE(pool.cacheBlock((*blocks)[1], hashOf(9)));
  EXPECT_FALSE(pool.isCached((*blocks)[1]));
  EXPECT_TRUE(pool.cacheBlock((*blocks)[0], hashOf(9))); // idempotent
  EXPECT_FALSE(pool.cacheBlock((*blocks)[0], hashOf(8)));
  EXPECT_EQ(pool.numCachedBlocks(), 1u);
  ASSERT_POOL_OK(pool);
}

TEST(BlockPool, RandomOperationsKeepInvariants) {
  // A reference model (plain vectors) checked against the pool after each
  // of 20 000 random operations.
  const uint32_t numBlocks = 32;
  BlockPool pool(numBlocks, 16);
  std::vector<uint32_t> modelRefs(numBlocks, 0);
  std::vector<BlockId> held;
  std::mt19937 random(42);
  uint64_t nextHash = 1;
  for (int step = 0; step < 20000; ++step) {
    int action = int(random() % 4);
    if (action == 0) {
      uint32_t count = random() % 6;
      uint32_t free = 0;
      for (uint32_t refs : modelRefs)
        free += refs == 0;
      auto blocks = pool.allocate(count);
      ASSERT_EQ(bool(blocks), count <= free);
      if (!blocks) {
        llvm::consumeError(blocks.takeError());
        continue;
      }
      for (BlockId block : *blocks) {
        ASSERT_EQ(modelRefs[block], 0u) << "allocated a referenced block";
        modelRefs[block] = 1;
        held.push_back(block);
        if (random() % 2)
          pool.cacheBlock(block, hashOf(nextHash++));
      }
    } else if (action == 1 && !held.empty()) {
      size_t index = random() % held.size();
      pool.free({held[index]});
      --modelRefs[held[index]];
      held.erase(held.begin() + long(index));
    } else if (action == 2) {
      // A hit on a random earlier hash, if still cached.
      auto found = pool.lookup(hashOf(1 + random() % nextHash));
      if (found) {
        pool.touch({*found});
        ++modelRefs[*found];
        held.push_back(*found);
      }
    } else {
      ASSERT_POOL_OK(pool);
    }
    for (BlockId block = 0; block < numBlocks; ++block)
      ASSERT_EQ(pool.refCount(block), modelRefs[block]);
  }
  ASSERT_POOL_OK(pool);
}

TEST(KvCacheCapacity, ParsesTokensAndSizes) {
  auto tokens = parseKvCacheCapacity("8192", 16, 1000);
  ASSERT_TRUE(bool(tokens));
  EXPECT_EQ(*tokens, 512u);
  auto tok = parseKvCacheCapacity("100tok", 16, 1000);
  ASSERT_TRUE(bool(tok));
  EXPECT_EQ(*tok, 6u);
  // SmolLM2: 30 layers x 3 heads x 64 dims x 16 tokens x 2 (K,V) x 4 bytes.
  const uint64_t blockBytes = 30ull * 3 * 64 * 16 * 2 * 4;
  auto mib = parseKvCacheCapacity("256MiB", 16, blockBytes);
  ASSERT_TRUE(bool(mib));
  EXPECT_EQ(*mib, uint32_t((256ull << 20) / blockBytes));
  auto gib = parseKvCacheCapacity("1GiB", 16, blockBytes);
  ASSERT_TRUE(bool(gib));
  EXPECT_EQ(*gib, uint32_t((1ull << 30) / blockBytes));
}

TEST(KvCacheCapacity, RejectsMalformedOrEmptyCapacities) {
  for (const char *text : {"", "MiB", "12 parsecs", "-5", "8"}) {
    auto blocks = parseKvCacheCapacity(text, 16, 1 << 20);
    ASSERT_FALSE(bool(blocks)) << text;
    std::string message = llvm::toString(blocks.takeError());
    EXPECT_NE(message.find("--kv-cache"), std::string::npos) << message;
  }
}

TEST(KvCacheCapacity, RejectsCapacitiesThatOverflow) {
  // 99999999999 GiB overflows 64 bits of bytes; 10^14 tokens are more
  // blocks than a BlockId counts.
  for (const char *text : {"99999999999GiB", "99999999999999"}) {
    auto blocks = parseKvCacheCapacity(text, 16, 1 << 20);
    ASSERT_FALSE(bool(blocks)) << text;
    std::string message = llvm::toString(blocks.takeError());
    EXPECT_NE(message.find(text), std::string::npos) << message;
  }
}

} // namespace
