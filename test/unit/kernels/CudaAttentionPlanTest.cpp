//===- CudaAttentionPlanTest.cpp - The CUDA attention's plan, on the host -===//
//
// The work list buildAttentionPlan hands the CUDA attention kernel, checked
// without a GPU: every (query row, KV head) is covered once with every page
// it may see, splits follow the tile's own length only, malformed batches
// are refused. Then the kernel's algorithm is replayed on the host over
// that plan with the kernel's own per-row arithmetic (AttentionMath.h,
// KvMath.h, ElementwiseMath.h): item by item, a block staged and rotated
// at a time, split states merged as the merge launch does. Its output must
// match cpu::pagedAttention (scalar path) over the same KvStorage: f16 and
// f32 K/V, K stored rotated and rope-in-kernel, prefill, decode and spans.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cuda/AttentionMath.h"
#include "runtime/kernels/cuda/AttentionPlan.h"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/KvMath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace {

using namespace spanc;

struct Sequence {
  std::vector<int32_t> blockIds;
  std::vector<int32_t> validTokens;
  int numQueries = 0;
};

struct Batch {
  std::vector<int32_t> queryOffsets = {0}, pageOffsets = {0}, blockIds,
                       validTokens;
  explicit Batch(const std::vector<Sequence> &sequences) {
    for (const Sequence &sequence : sequences) {
      queryOffsets.push_back(queryOffsets.back() + sequence.numQueries);
      pageOffsets.push_back(pageOffsets.back() +
                            int32_t(sequence.blockIds.size()));
      blockIds.insert(blockIds.end(), sequence.blockIds.begin(),
                      sequence.blockIds.end());
      validTokens.insert(validTokens.end(), sequence.validTokens.begin(),
                         sequence.validTokens.end());
    }
  }
  cuda::PagedAttentionBatch view() const {
    cuda::PagedAttentionBatch batch;
    batch.numSequences = int(queryOffsets.size()) - 1;
    batch.queryOffsets = queryOffsets.data();
    batch.pageOffsets = pageOffsets.data();
    batch.blockIds = blockIds.data();
    batch.validTokens = validTokens.data();
    return batch;
  }
};

cuda::PagedAttentionShape shapeOf(int queryHeads, int kvHeads, int headDim) {
  cuda::PagedAttentionShape shape;
  shape.numQueryHeads = queryHeads;
  shape.numKvHeads = kvHeads;
  shape.headDim = headDim;
  shape.scale = 1.0f / std::sqrt(float(headDim));
  shape.queryRowStride = int64_t(queryHeads) * headDim;
  shape.outputRowStride = int64_t(queryHeads) * headDim;
  return shape;
}

/// A sequence of `pages` full blocks from `firstBlock` on, the last one
/// holding `lastValid`, asking for `queries` queries.
Sequence contiguous(int firstBlock, int pages, int lastValid, int queries,
                    int blockSize = 16) {
  Sequence sequence;
  for (int page = 0; page < pages; ++page) {
    sequence.blockIds.push_back(firstBlock + page);
    sequence.validTokens.push_back(page + 1 == pages ? lastValid : blockSize);
  }
  sequence.numQueries = queries;
  return sequence;
}

TEST(CudaAttentionPlan, CoversEveryRowAndHeadOnceWithItsVisiblePages) {
  const cuda::PagedAttentionShape shape = shapeOf(9, 3, 64);
  // A 40-token prefill with a partial page and padding in the middle, and
  // a decode step over a long context.
  Sequence prefill = contiguous(0, 3, 8, 40);
  prefill.validTokens[1] = 16;
  Sequence decode = contiguous(10, 40, 5, 1);
  const Batch batch({prefill, decode});
  cuda::AttentionPlan plan;
  ASSERT_TRUE(cuda::buildAttentionPlan(shape, batch.view(), 16, {}, plan).ok());
  EXPECT_EQ(plan.numPages, 43);
  EXPECT_EQ(plan.pageStarts[1], 16);
  EXPECT_EQ(plan.pageStarts[3], 0); // the second sequence starts over

  // (sequence, kvHead, tile row) -> pages seen, over all items.
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::set<int>> seen;
  for (const cuda::AttentionWorkItem &item : plan.items) {
    EXPECT_LE(item.numRows, plan.tileRows);
    for (int row = item.firstRow; row < item.firstRow + item.numRows; ++row)
      for (int page = item.pageBegin; page < item.pageEnd; ++page)
        EXPECT_TRUE(
            seen[Key(item.sequence, item.kvHead, row)].insert(page).second)
            << "page " << page << " twice";
  }
  // Prefill: 40 queries x 3 heads per group = 120 rows per KV head.
  for (int kvHead = 0; kvHead < 3; ++kvHead) {
    for (int row = 0; row < 120; ++row)
      EXPECT_TRUE(seen.count(Key(0, kvHead, row))) << row;
    EXPECT_FALSE(seen.count(Key(0, kvHead, 120)));
    // The decode row's tile sees all 40 pages, split in 5 ranges of 8.
    EXPECT_EQ(seen[Key(1, kvHead, 0)].size(), 40u);
    EXPECT_EQ(seen[Key(1, kvHead, 2)].size(), 40u);
    EXPECT_FALSE(seen.count(Key(1, kvHead, 3)));
  }
  // 64-row tiles: the first prefill tile (tokens 0..21) sees two pages
  // (the first row's masked slots of the second cost nothing), the second
  // (tokens 21..39) all three.
  EXPECT_EQ(plan.tileRows, 64);
  EXPECT_EQ(seen[Key(0, 0, 0)], std::set<int>({0, 1}));
  EXPECT_EQ(seen[Key(0, 0, 64)], std::set<int>({0, 1, 2}));
  EXPECT_EQ(plan.merges.size(), 3u);
  // Each split range's state: 3 rows x (max, sum, 64 values).
  const int32_t stateFloats = 3 * 66;
  for (const cuda::AttentionMergeGroup &group : plan.merges) {
    EXPECT_EQ(group.numSplits, 5);
    const cuda::AttentionWorkItem &first = plan.items[size_t(group.firstItem)];
    for (int split = 0; split < group.numSplits; ++split) {
      const cuda::AttentionWorkItem &item =
          plan.items[size_t(group.firstItem + split)];
      EXPECT_EQ(item.partial, first.partial + split * stateFloats);
      EXPECT_EQ(item.pageBegin, first.pageBegin + 8 * split);
      EXPECT_EQ(item.rangePages, 8);
    }
  }
  EXPECT_EQ(plan.numPartialFloats, 15 * stateFloats);
}

TEST(CudaAttentionPlan, RangesDependOnThePageListAloneNotOnTheBatch) {
  const cuda::PagedAttentionShape shape = shapeOf(4, 2, 64);
  const Sequence decode = contiguous(0, 30, 16, 1);
  cuda::AttentionPlan alone, shared;
  ASSERT_TRUE(
      cuda::buildAttentionPlan(shape, Batch({decode}).view(), 16, {}, alone)
          .ok());
  ASSERT_TRUE(cuda::buildAttentionPlan(
                  shape, Batch({contiguous(40, 2, 5, 20), decode}).view(), 16,
                  {}, shared)
                  .ok());
  std::vector<std::pair<int, int>> aloneRanges, sharedRanges;
  for (const cuda::AttentionWorkItem &item : alone.items)
    aloneRanges.push_back({item.pageBegin, item.pageEnd});
  for (const cuda::AttentionWorkItem &item : shared.items)
    if (item.sequence == 1)
      sharedRanges.push_back({item.pageBegin - 2, item.pageEnd - 2});
  EXPECT_EQ(aloneRanges, sharedRanges);
}

TEST(CudaAttentionPlan, PacksPageListsAndPlanIntoOneArray) {
  const cuda::PagedAttentionShape shape = shapeOf(4, 2, 64);
  const Batch batch({contiguous(5, 3, 7, 2), contiguous(0, 20, 16, 1)});
  cuda::AttentionPlan plan;
  ASSERT_TRUE(cuda::buildAttentionPlan(shape, batch.view(), 16, {}, plan).ok());
  cuda::PackedAttentionPlan packed;
  cuda::packAttentionPlan(plan, batch.view(), packed);
  const int32_t *words = packed.words.data();
  auto equals = [&](size_t offset, const std::vector<int32_t> &expected) {
    return std::vector<int32_t>(words + offset,
                                words + offset + expected.size()) == expected;
  };
  EXPECT_TRUE(equals(packed.queryOffsets, batch.queryOffsets));
  EXPECT_TRUE(equals(packed.pageOffsets, batch.pageOffsets));
  EXPECT_TRUE(equals(packed.blockIds, batch.blockIds));
  EXPECT_TRUE(equals(packed.validTokens, batch.validTokens));
  EXPECT_TRUE(equals(packed.pageStarts, plan.pageStarts));
  ASSERT_FALSE(plan.merges.empty());
  const int32_t *lastItem = words + packed.items + 8 * (plan.items.size() - 1);
  EXPECT_EQ(lastItem[4], plan.items.back().pageBegin);
  EXPECT_EQ(lastItem[6], plan.items.back().rangePages);
  EXPECT_EQ(lastItem[7], plan.items.back().partial);
  EXPECT_EQ(words[packed.merges + 1], plan.merges[0].numSplits);
  EXPECT_EQ(packed.words.size(), packed.merges + 2 * plan.merges.size());
}

TEST(CudaAttentionPlan, EverySupportedShapeFitsHopperSharedMemory) {
  // sm_90 lets a block opt in to 227 KiB (sm_80 163 KiB); SmolLM2 at
  // 16-token blocks needs no opt-in, Llama-3-8B 52 KiB.
  int64_t largest = 0;
  for (int headDim = 8; headDim <= kernels::kMaxHeadDim; headDim += 8)
    for (int blockSize = 1; blockSize <= kernels::kMaxBlockSize; ++blockSize)
      largest = std::max(
          largest, cuda::attentionSharedBytes(
                       headDim, blockSize, cuda::attentionTileRows(headDim)));
  EXPECT_LE(largest, 227 * 1024);
  EXPECT_LE(cuda::attentionSharedBytes(64, 16, cuda::attentionTileRows(64)),
            48 * 1024);
  EXPECT_LE(largest, 163 * 1024);
  EXPECT_EQ(cuda::attentionSharedBytes(128, 16, cuda::attentionTileRows(128)),
            (64 * 128 + 2 * 128 * 16 + 64 * 16) * 4);
}

TEST(CudaAttentionPlan, RefusesMalformedBatches) {
  cuda::AttentionPlan plan;
  const Batch good({contiguous(0, 2, 4, 3)});
  EXPECT_FALSE(
      cuda::buildAttentionPlan(shapeOf(6, 4, 64), good.view(), 16, {}, plan)
          .ok());
  EXPECT_FALSE(
      cuda::buildAttentionPlan(shapeOf(4, 2, 512), good.view(), 16, {}, plan)
          .ok());
  EXPECT_FALSE(
      cuda::buildAttentionPlan(shapeOf(4, 2, 64), good.view(), 128, {}, plan)
          .ok());
  const cuda::Status tooMany = cuda::buildAttentionPlan(
      shapeOf(4, 2, 64), Batch({contiguous(0, 1, 4, 5)}).view(), 16, {}, plan);
  ASSERT_FALSE(tooMany.ok());
  EXPECT_NE(tooMany.message().find("sequence 0: 5 queries but 4 valid"),
            std::string::npos)
      << tooMany.message();
  Sequence overfull = contiguous(0, 1, 17, 1);
  EXPECT_FALSE(cuda::buildAttentionPlan(shapeOf(4, 2, 64),
                                        Batch({overfull}).view(), 16, {}, plan)
                   .ok());
}

/// The CUDA kernel's algorithm on the host, item by item over the plan:
/// ranges folded from scratch and merged in order, split ranges written as
/// states and merged as the merge launch merges them.
template <typename Element>
void replayKernel(const cuda::PagedAttentionShape &shape,
                  const cuda::AttentionPlan &plan, const Batch &batch,
                  const cpu::PagedKvView &kv, const cpu::RopeTable *rope,
                  const float *queries, float *output) {
  const int headDim = shape.headDim, blockSize = kv.blockSize;
  const int groupSize = shape.numQueryHeads / shape.numKvHeads;
  const size_t tile = size_t(plan.tileRows);
  std::vector<float> partials(size_t(plan.numPartialFloats));
  auto outputAt = [&](int32_t firstQueryRow,
                      const cuda::AttentionWorkItem &item, int row,
                      int dim) -> float & {
    const int64_t tileRow = item.firstRow + row;
    const int64_t token = cuda::tileRowToken(tileRow, groupSize);
    const int head = cuda::tileRowHead(item.kvHead, tileRow, groupSize);
    return output[(firstQueryRow + token) * shape.outputRowStride +
                  int64_t(head) * headDim + dim];
  };
  for (const cuda::AttentionWorkItem &item : plan.items) {
    std::vector<float> query(tile * size_t(headDim)), accumulator(query.size()),
        running(query.size(), 0.0f), keys(size_t(headDim * blockSize)),
        values(size_t(headDim * blockSize)), scores(tile * size_t(blockSize));
    std::vector<float> maxScores(tile), sums(tile), corrections(tile),
        runningMax(tile, -INFINITY), runningSum(tile, 0.0f);
    std::vector<int64_t> limits(tile);
    const int32_t firstQueryRow = batch.queryOffsets[size_t(item.sequence)];
    const int64_t numQueries =
        batch.queryOffsets[size_t(item.sequence) + 1] - firstQueryRow;
    const int32_t lastPage = batch.pageOffsets[size_t(item.sequence) + 1] - 1;
    const int64_t length = int64_t(plan.pageStarts[size_t(lastPage)]) +
                           batch.validTokens[size_t(lastPage)];
    for (int row = 0; row < item.numRows; ++row) {
      const int64_t tileRow = item.firstRow + row;
      const int64_t token = cuda::tileRowToken(tileRow, groupSize);
      const int head = cuda::tileRowHead(item.kvHead, tileRow, groupSize);
      for (int dim = 0; dim < headDim; ++dim)
        query[size_t(row * headDim + dim)] =
            queries[(firstQueryRow + token) * shape.queryRowStride +
                    int64_t(head) * headDim + dim] *
            shape.scale;
      limits[size_t(row)] = cuda::queryLimit(length, numQueries, token);
    }
    for (int32_t rangeBegin = item.pageBegin; rangeBegin < item.pageEnd;
         rangeBegin += item.rangePages) {
      const int32_t rangeEnd =
          std::min(item.pageEnd, rangeBegin + item.rangePages);
      std::fill(accumulator.begin(), accumulator.end(), 0.0f);
      std::fill(maxScores.begin(), maxScores.end(), -INFINITY);
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (int32_t page = rangeBegin; page < rangeEnd; ++page) {
        const int valid = batch.validTokens[size_t(page)];
        if (valid == 0)
          continue;
        const int64_t start = plan.pageStarts[size_t(page)];
        const int64_t block = batch.blockIds[size_t(page)];
        const Element *keyLayer = static_cast<const Element *>(kv.keys);
        const Element *valueLayer = static_cast<const Element *>(kv.values);
        for (int index = 0; index < headDim * blockSize; ++index) {
          keys[size_t(index)] = cuda::loadKv(
              keyLayer + cuda::keyOffset(kv.blockStride, kv.headStride,
                                         blockSize, block, item.kvHead,
                                         index % blockSize, index / blockSize));
          values[size_t(index)] = cuda::loadKv(
              valueLayer + cuda::valueOffset(kv.blockStride, kv.headStride,
                                             headDim, block, item.kvHead,
                                             index / headDim, index % headDim));
        }
        if (rope) {
          const int rotaryDim = rope->config().rotaryDim, half = rotaryDim / 2;
          for (int index = 0; index < half * valid; ++index) {
            const int pair = index / valid, slot = index % valid;
            const float *cosSin = rope->row(start + slot);
            int first, second;
            cuda::ropePairDims(rope->config().order == cpu::RopeOrder::NeoX,
                               rotaryDim, pair, first, second);
            float &a = keys[size_t(first * blockSize + slot)];
            float &b = keys[size_t(second * blockSize + slot)];
            cuda::rotatePair(a, b, cosSin[pair], cosSin[half + pair], a, b);
          }
        }
        for (int row = 0; row < item.numRows; ++row)
          for (int slot = 0; slot < blockSize; ++slot) {
            float score = -INFINITY;
            if (slot < cuda::visibleSlots(valid, start, limits[size_t(row)])) {
              score = 0.0f;
              for (int dim = 0; dim < headDim; ++dim)
                score += query[size_t(row * headDim + dim)] *
                         keys[size_t(dim * blockSize + slot)];
            }
            scores[size_t(row * blockSize + slot)] = score;
          }
        for (int row = 0; row < item.numRows; ++row) {
          const int count =
              cuda::visibleSlots(valid, start, limits[size_t(row)]);
          if (count == 0) {
            corrections[size_t(row)] = 1.0f;
            continue;
          }
          float *rowScores = scores.data() + row * blockSize;
          float blockMax = -INFINITY;
          for (int slot = 0; slot < count; ++slot)
            blockMax = std::fmax(blockMax, rowScores[slot]);
          const float newMax =
              cuda::softmaxNewMax(maxScores[size_t(row)], blockMax);
          const float correction =
              cuda::softmaxCorrection(maxScores[size_t(row)], newMax);
          float blockSum = 0.0f;
          for (int slot = 0; slot < blockSize; ++slot) {
            const float weight =
                slot < count ? cuda::softmaxWeight(rowScores[slot], newMax) : 0;
            rowScores[slot] = weight;
            blockSum += weight;
          }
          sums[size_t(row)] = sums[size_t(row)] * correction + blockSum;
          maxScores[size_t(row)] = newMax;
          corrections[size_t(row)] = correction;
        }
        for (int row = 0; row < item.numRows; ++row) {
          const int count =
              cuda::visibleSlots(valid, start, limits[size_t(row)]);
          if (count == 0)
            continue;
          for (int dim = 0; dim < headDim; ++dim) {
            float sum = accumulator[size_t(row * headDim + dim)] *
                        corrections[size_t(row)];
            for (int slot = 0; slot < count; ++slot)
              sum += scores[size_t(row * blockSize + slot)] *
                     values[size_t(slot * headDim + dim)];
            accumulator[size_t(row * headDim + dim)] = sum;
          }
        }
      }
      if (item.partial >= 0)
        break;
      for (int row = 0; row < item.numRows; ++row) {
        if (!(sums[size_t(row)] > 0))
          continue;
        float newMax, keep, add;
        cuda::mergeFactors(runningMax[size_t(row)], maxScores[size_t(row)],
                           newMax, keep, add);
        runningSum[size_t(row)] = cuda::mergeValue(
            runningSum[size_t(row)], keep, sums[size_t(row)], add);
        runningMax[size_t(row)] = newMax;
        for (int dim = 0; dim < headDim; ++dim) {
          float &value = running[size_t(row * headDim + dim)];
          value = cuda::mergeValue(
              value, keep, accumulator[size_t(row * headDim + dim)], add);
        }
      }
    }
    if (item.partial >= 0) {
      float *state = partials.data() + item.partial;
      for (int row = 0; row < item.numRows; ++row) {
        state[row * (2 + headDim)] = maxScores[size_t(row)];
        state[row * (2 + headDim) + 1] = sums[size_t(row)];
        for (int dim = 0; dim < headDim; ++dim)
          state[row * (2 + headDim) + 2 + dim] =
              accumulator[size_t(row * headDim + dim)];
      }
      continue;
    }
    for (int row = 0; row < item.numRows; ++row)
      for (int dim = 0; dim < headDim; ++dim)
        outputAt(firstQueryRow, item, row, dim) = cuda::attentionOutput(
            running[size_t(row * headDim + dim)], runningSum[size_t(row)]);
  }
  // The merge launch.
  for (const cuda::AttentionMergeGroup &group : plan.merges) {
    const cuda::AttentionWorkItem &first = plan.items[size_t(group.firstItem)];
    const int32_t firstQueryRow = batch.queryOffsets[size_t(first.sequence)];
    for (int row = 0; row < first.numRows; ++row)
      for (int dim = 0; dim < headDim; ++dim) {
        float maxScore = -INFINITY, sum = 0, value = 0;
        for (int split = 0; split < group.numSplits; ++split) {
          const float *state =
              partials.data() +
              plan.items[size_t(group.firstItem + split)].partial +
              cuda::attentionStateFloats(row, headDim);
          if (!(state[1] > 0))
            continue;
          float newMax, keep, add;
          cuda::mergeFactors(maxScore, state[0], newMax, keep, add);
          sum = cuda::mergeValue(sum, keep, state[1], add);
          value = cuda::mergeValue(value, keep, state[2 + dim], add);
          maxScore = newMax;
        }
        outputAt(firstQueryRow, first, row, dim) =
            cuda::attentionOutput(value, sum);
      }
  }
}

struct ReplayCase {
  cpu::KvPrecision precision;
  bool ropeInKernel;
  cpu::RopeOrder order;
};

class CudaAttentionReplay : public testing::TestWithParam<ReplayCase> {};

TEST_P(CudaAttentionReplay, MatchesTheCpuKernelOverTheSamePageLists) {
  const ReplayCase param = GetParam();
  const int queryHeads = 6, kvHeads = 2, headDim = 64, blockSize = 16;
  backend::KvStorageConfig config;
  config.numLayers = 1;
  config.numKvHeads = kvHeads;
  config.headDim = headDim;
  config.blockSize = blockSize;
  config.numBlocks = 80;
  config.keysRotated = !param.ropeInKernel;
  config.precision = param.precision;
  auto storage = backend::KvStorage::create(config);
  ASSERT_TRUE(bool(storage)) << llvm::toString(storage.takeError());
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> key(size_t(kvHeads * headDim)), value(key.size());
  for (int64_t block = 0; block < config.numBlocks; ++block)
    for (int slot = 0; slot < blockSize; ++slot) {
      for (float &x : key)
        x = normal(rng);
      for (float &x : value)
        x = normal(rng);
      (*storage)->writeToken(0, block, slot, key.data(), value.data());
    }
  cpu::RopeConfig ropeConfig;
  ropeConfig.headDim = ropeConfig.rotaryDim = headDim;
  ropeConfig.order = param.order;
  cpu::RopeTable ropeTable(ropeConfig, 2048);

  // A prefill over a partial middle page, a span-like list of scattered
  // blocks, and decode steps short and long (split).
  Sequence prefill = contiguous(0, 4, 11, 37);
  prefill.validTokens[1] = 9;
  Sequence scattered;
  scattered.blockIds = {50, 7, 33, 12};
  scattered.validTokens = {16, 3, 16, 6};
  scattered.numQueries = 6;
  const Sequence shortDecode = contiguous(20, 2, 1, 1);
  const Sequence longDecode = contiguous(4, 45, 13, 1);
  const Batch batch({shortDecode, longDecode, prefill, scattered});
  const cuda::PagedAttentionShape shape = shapeOf(queryHeads, kvHeads, headDim);
  const int32_t numRows = batch.queryOffsets.back();
  std::vector<float> queries(size_t(numRows * shape.queryRowStride));
  for (float &x : queries)
    x = normal(rng);

  cpu::PagedAttentionShape cpuShape;
  cpuShape.numQueryHeads = queryHeads;
  cpuShape.numKvHeads = kvHeads;
  cpuShape.headDim = headDim;
  cpuShape.scale = shape.scale;
  cpuShape.queryRowStride = shape.queryRowStride;
  cpuShape.outputRowStride = shape.outputRowStride;
  cpu::PagedAttentionBatch cpuBatch;
  cpuBatch.numSequences = 4;
  cpuBatch.queryOffsets = batch.queryOffsets.data();
  cpuBatch.pageOffsets = batch.pageOffsets.data();
  cpuBatch.blockIds = batch.blockIds.data();
  cpuBatch.validTokens = batch.validTokens.data();
  cpu::PagedAttentionOptions options;
  options.forceScalar = true;
  options.allowAmx = false;
  options.keyRope = param.ropeInKernel ? &ropeTable : nullptr;
  cpu::AttentionWorkspace workspace;
  std::vector<float> expected(size_t(numRows * shape.outputRowStride));
  const cpu::PagedKvView view = (*storage)->layerView(0);
  cpu::pagedAttention(cpuShape, cpuBatch, view, queries.data(), expected.data(),
                      options, workspace);

  cuda::AttentionPlan plan;
  ASSERT_TRUE(
      cuda::buildAttentionPlan(shape, batch.view(), blockSize, {}, plan).ok());
  ASSERT_FALSE(plan.merges.empty()) << "the long decode must split";
  std::vector<float> actual(expected.size(), NAN);
  const cpu::RopeTable *rope = param.ropeInKernel ? &ropeTable : nullptr;
  if (param.precision == cpu::KvPrecision::F16)
    replayKernel<uint16_t>(shape, plan, batch, view, rope, queries.data(),
                           actual.data());
  else
    replayKernel<float>(shape, plan, batch, view, rope, queries.data(),
                        actual.data());
  for (size_t index = 0; index < expected.size(); ++index)
    ASSERT_NEAR(actual[index], expected[index], 2e-5f)
        << "row " << index / size_t(shape.outputRowStride) << " element "
        << index % size_t(shape.outputRowStride);
}

INSTANTIATE_TEST_SUITE_P(
    KvLayouts, CudaAttentionReplay,
    testing::Values(
        ReplayCase{cpu::KvPrecision::F16, false, cpu::RopeOrder::Normal},
        ReplayCase{cpu::KvPrecision::F32, false, cpu::RopeOrder::Normal},
        ReplayCase{cpu::KvPrecision::F16, true, cpu::RopeOrder::Normal},
        ReplayCase{cpu::KvPrecision::F16, true, cpu::RopeOrder::NeoX}));

/// A storage filled with random K/V and queries for every row of a batch;
/// replays the kernel over `batch` planned with `options`.
struct ReplayBench {
  static constexpr int queryHeads = 6, kvHeads = 2, headDim = 64;
  std::unique_ptr<backend::KvStorage> storage;
  cpu::RopeTable ropeTable;
  bool ropeInKernel = false;

  explicit ReplayBench(const ReplayCase &param)
      : ropeInKernel(param.ropeInKernel) {
    backend::KvStorageConfig config;
    config.numLayers = 1;
    config.numKvHeads = kvHeads;
    config.headDim = headDim;
    config.numBlocks = 80;
    config.keysRotated = !param.ropeInKernel;
    config.precision = param.precision;
    auto created = backend::KvStorage::create(config);
    EXPECT_TRUE(bool(created));
    storage = std::move(*created);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> key(size_t(kvHeads * headDim)), value(key.size());
    for (int64_t block = 0; block < config.numBlocks; ++block)
      for (int slot = 0; slot < 16; ++slot) {
        for (float &x : key)
          x = normal(rng);
        for (float &x : value)
          x = normal(rng);
        storage->writeToken(0, block, slot, key.data(), value.data());
      }
    cpu::RopeConfig ropeConfig;
    ropeConfig.headDim = ropeConfig.rotaryDim = headDim;
    ropeConfig.order = param.order;
    ropeTable = cpu::RopeTable(ropeConfig, 2048);
  }

  /// Rows of `batch`, whose queries are row r of `queriesByToken` for the
  /// token at logical index (length - numQueries + r) of each sequence.
  std::vector<float> run(const Batch &batch,
                         const std::vector<std::vector<float>> &tokenQueries,
                         const cuda::AttentionPlanOptions &options,
                         cuda::AttentionPlan *planOut = nullptr) {
    const cuda::PagedAttentionShape shape =
        shapeOf(queryHeads, kvHeads, headDim);
    const int32_t numRows = batch.queryOffsets.back();
    std::vector<float> queries;
    for (size_t sequence = 0; sequence + 1 < batch.queryOffsets.size();
         ++sequence) {
      int64_t length = 0;
      for (int32_t page = batch.pageOffsets[sequence];
           page < batch.pageOffsets[sequence + 1]; ++page)
        length += batch.validTokens[size_t(page)];
      const int32_t count =
          batch.queryOffsets[sequence + 1] - batch.queryOffsets[sequence];
      for (int64_t token = length - count; token < length; ++token)
        queries.insert(queries.end(), tokenQueries[size_t(token)].begin(),
                       tokenQueries[size_t(token)].end());
    }
    cuda::AttentionPlan plan;
    EXPECT_TRUE(
        cuda::buildAttentionPlan(shape, batch.view(), 16, options, plan).ok());
    std::vector<float> output(size_t(numRows * shape.outputRowStride), NAN);
    const cpu::RopeTable *rope = ropeInKernel ? &ropeTable : nullptr;
    if (storage->precision() == cpu::KvPrecision::F16)
      replayKernel<uint16_t>(shape, plan, batch, storage->layerView(0), rope,
                             queries.data(), output.data());
    else
      replayKernel<float>(shape, plan, batch, storage->layerView(0), rope,
                          queries.data(), output.data());
    if (planOut)
      *planOut = plan;
    return output;
  }
};

TEST_P(CudaAttentionReplay, RowsGiveTheSameBitsHoweverTheirTilesAreCut) {
  ReplayBench bench(GetParam());
  const int64_t width = ReplayBench::queryHeads * ReplayBench::headDim;
  // A 307-token prompt over 20 pages (3 ranges of 8 pages), with padding.
  Sequence prompt = contiguous(30, 20, 12, 0);
  prompt.validTokens[4] = 7;
  const int total =
      std::accumulate(prompt.validTokens.begin(), prompt.validTokens.end(), 0);
  ASSERT_EQ(total, 307);
  prompt.numQueries = total;
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> tokenQueries(
      static_cast<size_t>(total), std::vector<float>(size_t(width)));
  for (std::vector<float> &row : tokenQueries)
    for (float &x : row)
      x = normal(rng);

  cuda::AttentionPlan missPlan, splitPlan;
  const std::vector<float> miss =
      bench.run(Batch({prompt}), tokenQueries, {}, &missPlan);
  cuda::AttentionPlanOptions always;
  always.splitting = cuda::AttentionSplitting::Always;
  const std::vector<float> split =
      bench.run(Batch({prompt}), tokenQueries, always, &splitPlan);
  ASSERT_FALSE(splitPlan.merges.empty());
  cuda::AttentionPlanOptions never;
  never.splitting = cuda::AttentionSplitting::Never;
  const std::vector<float> whole =
      bench.run(Batch({prompt}), tokenQueries, never);
  EXPECT_EQ(std::memcmp(split.data(), miss.data(), miss.size() * 4), 0);
  EXPECT_EQ(std::memcmp(whole.data(), miss.data(), miss.size() * 4), 0);

  // A cache hit: the same page list, only the last 5 tokens computed, next
  // to a decode step; each row must give the bits the full prompt gave.
  Sequence tail = prompt;
  tail.numQueries = 5;
  const std::vector<float> hit =
      bench.run(Batch({contiguous(0, 3, 2, 1), tail}), tokenQueries, {});
  for (int64_t row = 0; row < 5; ++row)
    EXPECT_EQ(std::memcmp(hit.data() + (1 + row) * width,
                          miss.data() + (total - 5 + row) * width,
                          size_t(width) * 4),
              0)
        << "tail row " << row;
}

} // namespace
