//===- BlockHashTest.cpp - Rules of KV block hashes -----------------------===//

#include "runtime/kv/BlockHash.h"

#include "llvm/ADT/DenseSet.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

using namespace spanc::kv;

namespace {

std::vector<TokenId> iota(int count, TokenId first) {
  std::vector<TokenId> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(BlockHash, SameInputsGiveSameHash) {
  BlockHasher hasher("smollm2-135m");
  std::vector<TokenId> tokens = iota(16, 100);
  EXPECT_EQ(hasher.hashBlock(hasher.root(), tokens),
            BlockHasher("smollm2-135m").hashBlock(hasher.root(), tokens));
}

TEST(BlockHash, ModelIdChangesEveryHash) {
  BlockHasher first("model-a"), second("model-b");
  EXPECT_NE(first.root(), second.root());
  std::vector<TokenId> tokens = iota(40, 7);
  llvm::SmallVector<BlockHash, 4> a, b;
  first.hashChain(first.root(), tokens, 16, a);
  second.hashChain(second.root(), tokens, 16, b);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NE(a[i], b[i]) << "block " << i;
  // Even with the same parent the model enters each block's hash.
  EXPECT_NE(first.hashBlock(first.root(), tokens),
            second.hashBlock(first.root(), tokens));
}

TEST(BlockHash, ChainDependsOnEveryEarlierToken) {
  BlockHasher hasher("m");
  std::vector<TokenId> tokens = iota(64, 1);
  llvm::SmallVector<BlockHash, 4> reference;
  hasher.hashChain(hasher.root(), tokens, 16, reference);
  for (size_t changed : {0, 5, 15, 16, 31, 47}) {
    std::vector<TokenId> other = tokens;
    other[changed] += 1000;
    llvm::SmallVector<BlockHash, 4> hashes;
    hasher.hashChain(hasher.root(), other, 16, hashes);
    for (size_t block = 0; block < 4; ++block) {
      if (block < changed / 16)
        EXPECT_EQ(hashes[block], reference[block])
            << "token " << changed << " block " << block;
      else
        EXPECT_NE(hashes[block], reference[block])
            << "token " << changed << " block " << block;
    }
  }
}

TEST(BlockHash, PartialBlockIsKeyedByItsLength) {
  BlockHasher hasher("m");
  std::vector<TokenId> tokens = iota(16, 1);
  BlockHash full = hasher.hashBlock(hasher.root(), tokens);
  BlockHash partial = hasher.hashBlock(
      hasher.root(), llvm::ArrayRef<TokenId>(tokens).take_front(9));
  EXPECT_NE(full, partial);
  // Token 0 vs a missing token: [1..8, 0] differs from [1..8].
  std::vector<TokenId> withZero(tokens.begin(), tokens.begin() + 8);
  withZero.push_back(0);
  EXPECT_NE(hasher.hashBlock(hasher.root(), withZero),
            hasher.hashBlock(hasher.root(),
                             llvm::ArrayRef<TokenId>(tokens).take_front(8)));
  llvm::SmallVector<BlockHash, 2> chain;
  hasher.hashChain(hasher.root(), llvm::ArrayRef<TokenId>(tokens).take_front(9),
                   16, chain);
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(chain[0], partial);
}

TEST(BlockHash, JoinIsOrderSensitive) {
  BlockHasher hasher("m");
  BlockHash prefix = hasher.hashBlock(hasher.root(), iota(16, 1));
  BlockHash a = hasher.hashBlock(hasher.root(), iota(16, 100));
  BlockHash b = hasher.hashBlock(hasher.root(), iota(16, 200));
  BlockHash ab = hasher.join(hasher.join(prefix, a), b);
  BlockHash ba = hasher.join(hasher.join(prefix, b), a);
  EXPECT_NE(ab, ba);
  // Joining nothing onto the empty context is the segment itself: a span
  // with nothing before it is exactly a causal start.
  EXPECT_EQ(hasher.join(hasher.root(), a), a);
  EXPECT_NE(hasher.join(prefix, a), a);
}

TEST(BlockHash, HashesOfDistinctBlocksAreDistinct) {
  BlockHasher hasher("m");
  llvm::DenseSet<BlockHash> seen;
  std::vector<TokenId> tokens = iota(16 * 512, 3);
  llvm::SmallVector<BlockHash, 512> chain;
  hasher.hashChain(hasher.root(), tokens, 16, chain);
  for (const BlockHash &hash : chain)
    EXPECT_TRUE(seen.insert(hash).second);
  EXPECT_EQ(chain.front().str().size(), 32u);
}

} // namespace
