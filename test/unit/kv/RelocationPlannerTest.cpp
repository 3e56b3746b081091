//===- RelocationPlannerTest.cpp - CIDRA plans on hand-made graphs --------===//
//
// Each plan is also executed with relocateBlocks on a small pool of real K/V
// data and every block a request reads is compared with its contents before
// the step rotated (in double) to the position the request wants.
//
//===----------------------------------------------------------------------===//

#include "runtime/kv/RelocationPlanner.h"
#include "runtime/kernels/cpu/Rerope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace spanc;
using namespace spanc::kv;

namespace {

#define ASSERT_POOL_OK(pool)                                                   \
  do {                                                                         \
    llvm::Error error = (pool).verify();                                       \
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));             \
  } while (0)

/// K/V for a pool: 2 layers, 1 head, head dim 8, block size 4, token-major.
struct Storage {
  static constexpr int HeadDim = 8, BlockSize = 4, NumLayers = 2;
  cpu::KvBlockLayout layout{
      NumLayers,          1,       HeadDim, BlockSize, HeadDim *BlockSize,
      HeadDim *BlockSize, HeadDim, 1};
  std::vector<double> frequencies = cpu::ropeFrequencies(10000.0, HeadDim);
  cpu::RopeRotation rotation{cpu::RopePairing::Normal, HeadDim,
                             frequencies.data()};
  std::vector<std::vector<float>> keys, values;
  std::vector<void *> keyPointers, valuePointers;

  explicit Storage(uint32_t numBlocks) {
    std::mt19937 random(99);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (int layer = 0; layer < NumLayers; ++layer) {
      keys.emplace_back(size_t(numBlocks) * HeadDim * BlockSize);
      values.emplace_back(size_t(numBlocks) * HeadDim * BlockSize);
      for (float &value : keys.back())
        value = uniform(random);
      for (float &value : values.back())
        value = uniform(random);
    }
    for (int layer = 0; layer < NumLayers; ++layer) {
      keyPointers.push_back(keys[layer].data());
      valuePointers.push_back(values[layer].data());
    }
  }

  void apply(const RelocationPlan &plan) {
    for (const auto &batch : plan.batches) {
      std::vector<cpu::RelocationOp> ops;
      for (const RelocationOp &op : batch)
        ops.push_back({op.source, op.destination, op.delta});
      cpu::relocateBlocks(layout, rotation, keyPointers.data(),
                          valuePointers.data(), ops);
    }
  }

  /// Max error of block `block` now against `source` in `before` turned by
  /// `delta` (K) and copied (V).
  double error(const Storage &before, BlockId source, int64_t delta,
               BlockId block) const {
    double worst = 0;
    const size_t blockFloats = HeadDim * BlockSize;
    for (int layer = 0; layer < NumLayers; ++layer)
      for (int token = 0; token < BlockSize; ++token) {
        const float *x =
            &before.keys[layer][source * blockFloats + token * HeadDim];
        const float *y = &keys[layer][block * blockFloats + token * HeadDim];
        for (int pair = 0; pair < HeadDim / 2; ++pair) {
          double angle = double(delta) * frequencies[pair];
          double a = x[2 * pair], b = x[2 * pair + 1];
          worst =
              std::max(worst, std::abs(y[2 * pair] - (a * std::cos(angle) -
                                                      b * std::sin(angle))));
          worst = std::max(
              worst, std::abs(y[2 * pair + 1] -
                              (a * std::sin(angle) + b * std::cos(angle))));
        }
        for (int dim = 0; dim < HeadDim; ++dim)
          worst = std::max(
              worst,
              double(std::abs(
                  values[layer][block * blockFloats + token * HeadDim + dim] -
                  before.values[layer][source * blockFloats + token * HeadDim +
                                       dim])));
      }
    return worst;
  }
};

/// The block request `request`'s use `tag` reads after the plan.
BlockId blockFor(const RelocationPlan &plan, const RelocationRequest &request) {
  for (const Rebinding &rebinding : plan.rebindings)
    if (rebinding.request == request.request && rebinding.tag == request.tag)
      return rebinding.block;
  return request.block;
}

/// A pool of `numBlocks` with `count` blocks allocated (ids 0..count-1).
std::pair<BlockPool, llvm::SmallVector<BlockId, 16>>
poolWith(uint32_t numBlocks, uint32_t count) {
  BlockPool pool(numBlocks, Storage::BlockSize);
  auto blocks = pool.allocate(count);
  EXPECT_TRUE(bool(blocks));
  for (BlockId block : *blocks)
    pool.setNumTokens(block, Storage::BlockSize);
  return {std::move(pool), *blocks};
}

TEST(StronglyConnectedComponents, FindsCyclesAndOrdersSinksFirst) {
  // 0 -> 1 -> 2 -> 0 (cycle), 2 -> 3, 3 -> 4 -> 3 (cycle), 5 alone, 6 -> 6.
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 8> graph(7);
  graph[0] = {1};
  graph[1] = {2};
  graph[2] = {0, 3};
  graph[3] = {4};
  graph[4] = {3};
  graph[6] = {6};
  auto components = stronglyConnectedComponents(graph);
  ASSERT_EQ(components.size(), 4u);
  auto sorted = [](llvm::SmallVector<uint32_t, 4> members) {
    llvm::sort(members);
    return members;
  };
  // {3,4} is reached from {0,1,2}, so it completes first.
  EXPECT_EQ(sorted(components[0]), (llvm::SmallVector<uint32_t, 4>{3, 4}));
  EXPECT_EQ(sorted(components[1]), (llvm::SmallVector<uint32_t, 4>{0, 1, 2}));
  EXPECT_EQ(sorted(components[2]), (llvm::SmallVector<uint32_t, 4>{5}));
  EXPECT_EQ(sorted(components[3]), (llvm::SmallVector<uint32_t, 4>{6}));
}

TEST(StronglyConnectedComponents, HandlesDeepGraphsWithoutRecursion) {
  // A 300 000-node chain feeding a 200 000-node cycle: a recursive Tarjan
  // would overflow the stack here.
  const uint32_t chain = 300000, cycle = 200000;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 8> graph(chain + cycle);
  for (uint32_t node = 0; node + 1 < chain + cycle; ++node)
    graph[node].push_back(node + 1);
  graph[chain + cycle - 1].push_back(chain);
  auto components = stronglyConnectedComponents(graph);
  ASSERT_EQ(components.size(), size_t(chain) + 1);
  EXPECT_EQ(components.front().size(), size_t(cycle));
}

TEST(RelocationPlanner, SoleUserRotatesInPlace) {
  auto [pool, blocks] = poolWith(4, 1);
  Storage storage(4), before(4);
  RelocationRequest request{7, 0, blocks[0], 20};
  auto plan = planRelocations(pool, request, {});
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numInPlace, 1u);
  EXPECT_EQ(plan->numCopies, 0u);
  ASSERT_EQ(plan->batches.size(), 1u);
  EXPECT_TRUE(plan->rebindings.empty());
  EXPECT_EQ(pool.storedPosition(blocks[0]), 20);
  storage.apply(*plan);
  EXPECT_LE(storage.error(before, blocks[0], 20, blocks[0]), 1e-5);
  EXPECT_EQ(pool.numFreeBlocks(), 3u);
}

TEST(RelocationPlanner, SameSpanAtTwoOffsetsInOneStepGetsTwoBlocks) {
  // The defect of the reference implementation: two requests of one step
  // reuse the same cached span block, one at offset 16, one at 48. Each
  // must read its own block, rotated to its own offset.
  auto [pool, blocks] = poolWith(8, 1);
  const BlockId span = blocks[0];
  pool.touch({span}); // both requests hold a reference
  pool.free({span});  // (the allocation's reference was the cache's)
  pool.touch({span});
  Storage storage(8), before(8);
  RelocationRequest first{1, 0, span, 16}, second{2, 0, span, 48};
  RelocationRequest both[] = {first, second};
  auto plan = planRelocations(pool, both, {});
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numInPlace, 1u);
  EXPECT_EQ(plan->numCopies, 1u);
  BlockId firstBlock = blockFor(*plan, first);
  BlockId secondBlock = blockFor(*plan, second);
  ASSERT_NE(firstBlock, secondBlock);
  EXPECT_EQ(pool.storedPosition(firstBlock), 16);
  EXPECT_EQ(pool.storedPosition(secondBlock), 48);
  EXPECT_EQ(pool.refCount(firstBlock), 1u);
  EXPECT_EQ(pool.refCount(secondBlock), 1u);
  // The copy reads the original before the original turns: two passes.
  EXPECT_EQ(plan->batches.size(), 2u);
  storage.apply(*plan);
  EXPECT_LE(storage.error(before, span, 16, firstBlock), 1e-5);
  EXPECT_LE(storage.error(before, span, 48, secondBlock), 1e-5);
  ASSERT_POOL_OK(pool);
}

TEST(RelocationPlanner, BlockReadWhereItIsIsDuplicatedNotTurned) {
  auto [pool, blocks] = poolWith(4, 1);
  pool.setStoredPosition(blocks[0], 32);
  pool.touch({blocks[0]}); // a running request reads it at 32
  Storage storage(4), before(4);
  RelocationRequest request{5, 3, blocks[0], 96};
  llvm::DenseSet<BlockId> readInPlace = {blocks[0]};
  auto plan = planRelocations(pool, request, readInPlace);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numInPlace, 0u);
  ASSERT_EQ(plan->rebindings.size(), 1u);
  EXPECT_EQ(plan->rebindings[0].tag, 3u);
  BlockId copy = plan->rebindings[0].block;
  EXPECT_EQ(pool.storedPosition(blocks[0]), 32);
  EXPECT_EQ(pool.storedPosition(copy), 96);
  EXPECT_EQ(pool.refCount(blocks[0]), 1u);
  EXPECT_EQ(pool.refCount(copy), 1u);
  EXPECT_EQ(pool.numTokens(copy), unsigned(Storage::BlockSize));
  storage.apply(*plan);
  EXPECT_LE(storage.error(before, blocks[0], 0, blocks[0]), 0.0);
  EXPECT_LE(storage.error(before, blocks[0], 64, copy), 1e-5);
  ASSERT_POOL_OK(pool);
}

TEST(RelocationPlanner, MostWantedPositionStaysInPlaceAndCopiesAreShared) {
  auto [pool, blocks] = poolWith(8, 1);
  const BlockId span = blocks[0];
  pool.touch({span, span, span, span}); // five requests, five references
  RelocationRequest requests[] = {{1, 0, span, 16},
                                  {2, 0, span, 48},
                                  {3, 0, span, 48},
                                  {4, 0, span, 16},
                                  {5, 0, span, 48}};
  Storage storage(8), before(8);
  auto plan = planRelocations(pool, requests, {});
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numInPlace, 1u);
  EXPECT_EQ(plan->numCopies, 1u);
  EXPECT_EQ(pool.storedPosition(span), 48);
  BlockId copy = blockFor(*plan, requests[0]);
  EXPECT_EQ(blockFor(*plan, requests[3]), copy);
  EXPECT_EQ(pool.refCount(copy), 2u);
  EXPECT_EQ(pool.refCount(span), 3u);
  storage.apply(*plan);
  for (const RelocationRequest &request : requests)
    EXPECT_LE(storage.error(before, span, request.wantedPosition,
                            blockFor(*plan, request)),
              1e-5);
  ASSERT_POOL_OK(pool);
}

TEST(RelocationPlanner, IndependentRelocationsShareOnePass) {
  auto [pool, blocks] = poolWith(16, 6);
  llvm::SmallVector<RelocationRequest, 6> requests;
  for (uint32_t i = 0; i < 6; ++i)
    requests.push_back({i, i, blocks[i], int64_t(100 + 7 * i)});
  Storage storage(16), before(16);
  auto plan = planRelocations(pool, requests, {});
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->batches.size(), 1u);
  EXPECT_EQ(plan->batches[0].size(), 6u);
  storage.apply(*plan);
  for (const RelocationRequest &request : requests)
    EXPECT_LE(storage.error(before, request.block, request.wantedPosition,
                            request.block),
              1e-5);
}

/// Checks that after the plan, each move's destination holds its source's
/// former contents turned by its delta.
void expectMovesDone(const Storage &storage, const Storage &before,
                     llvm::ArrayRef<RelocationOp> moves) {
  for (const RelocationOp &move : moves)
    EXPECT_LE(storage.error(before, move.source, move.delta, move.destination),
              1e-5)
        << move.source << " -> " << move.destination;
}

TEST(RelocationPlanner, SwapCycleIsBrokenWithTemporaries) {
  auto [pool, blocks] = poolWith(6, 2);
  RelocationOp moves[] = {{blocks[0], blocks[1], 5},
                          {blocks[1], blocks[0], -3}};
  Storage storage(6), before(6);
  auto plan = planRelocations(pool, {}, {}, moves);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numCycles, 1u);
  EXPECT_EQ(plan->numSerialCycles, 0u);
  EXPECT_EQ(plan->temporaries.size(), 2u);
  EXPECT_EQ(plan->batches.size(), 2u);
  storage.apply(*plan);
  expectMovesDone(storage, before, moves);
  pool.free(plan->temporaries);
  EXPECT_EQ(pool.numFreeBlocks(), 4u);
  ASSERT_POOL_OK(pool);
}

TEST(RelocationPlanner, LargeCycleTakesTheSerialPath) {
  const uint32_t length = 12;
  auto [pool, blocks] = poolWith(16, length);
  llvm::SmallVector<RelocationOp, 12> moves;
  for (uint32_t i = 0; i < length; ++i)
    moves.push_back({blocks[i], blocks[(i + 1) % length], int64_t(i) - 4});
  Storage storage(16), before(16);
  auto plan = planRelocations(pool, {}, {}, moves);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numCycles, 1u);
  EXPECT_EQ(plan->numSerialCycles, 1u);
  EXPECT_EQ(plan->temporaries.size(), 1u);
  EXPECT_EQ(plan->batches.size(), size_t(length) + 1);
  EXPECT_EQ(plan->numOps(), size_t(length) + 1);
  storage.apply(*plan);
  expectMovesDone(storage, before, moves);
}

TEST(RelocationPlanner, ChainsAndCyclesMixWithRelocations) {
  // Moves 0->1->2 (a chain: 1 must be read before it is overwritten), a
  // 3-cycle 3->4->5->3, and requests turning block 0 in place while the
  // chain still reads it.
  auto [pool, blocks] = poolWith(16, 6);
  RelocationOp moves[] = {{blocks[0], blocks[1], 2},
                          {blocks[1], blocks[2], 3},
                          {blocks[3], blocks[4], -1},
                          {blocks[4], blocks[5], 4},
                          {blocks[5], blocks[3], 6}};
  RelocationRequest request{9, 0, blocks[0], 11};
  Storage storage(16), before(16);
  auto plan = planRelocations(pool, request, {}, moves);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numCycles, 1u);
  EXPECT_EQ(plan->numInPlace, 1u);
  storage.apply(*plan);
  expectMovesDone(storage, before, moves);
  EXPECT_LE(storage.error(before, blocks[0], 11, blocks[0]), 1e-5);
  EXPECT_EQ(pool.storedPosition(blocks[0]), 11);
  EXPECT_EQ(pool.storedPosition(blocks[1]), 2);
  EXPECT_EQ(pool.storedPosition(blocks[3]), 6);
}

TEST(RelocationPlanner, FailsWithoutChangingThePoolWhenBlocksRunOut) {
  auto [pool, blocks] = poolWith(2, 2);
  pool.setStoredPosition(blocks[0], 0);
  RelocationRequest requests[] = {{1, 0, blocks[0], 16}};
  llvm::DenseSet<BlockId> readInPlace = {blocks[0]};
  auto plan = planRelocations(pool, requests, readInPlace);
  ASSERT_FALSE(bool(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_NE(message.find("KV cache full"), std::string::npos) << message;
  EXPECT_EQ(pool.storedPosition(blocks[0]), 0);
  EXPECT_EQ(pool.refCount(blocks[0]), 1u);
  EXPECT_EQ(pool.numFreeBlocks(), 0u);
  ASSERT_POOL_OK(pool);
}

TEST(RelocationPlanner, RejectsInconsistentInput) {
  auto [pool, blocks] = poolWith(4, 2);
  RelocationRequest unreferenced{1, 0, 3, 16};
  auto bad = planRelocations(pool, unreferenced, {});
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("no reference"),
            std::string::npos);
  RelocationOp twice[] = {{blocks[0], blocks[1], 1}, {blocks[0], blocks[1], 2}};
  auto twoWriters = planRelocations(pool, {}, {}, twice);
  ASSERT_FALSE(bool(twoWriters));
  EXPECT_NE(llvm::toString(twoWriters.takeError()).find("two moves"),
            std::string::npos);
  RelocationRequest wanted{1, 0, blocks[1], 8};
  RelocationOp overwrite[] = {{blocks[0], blocks[1], 1}};
  auto conflict = planRelocations(pool, wanted, {}, overwrite);
  ASSERT_FALSE(bool(conflict));
  llvm::consumeError(conflict.takeError());
  EXPECT_EQ(pool.storedPosition(blocks[1]), 0);
  ASSERT_POOL_OK(pool);
}

} // namespace
