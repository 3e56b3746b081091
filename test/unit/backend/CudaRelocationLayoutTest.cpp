//===- CudaRelocationLayoutTest.cpp - CIDRA batches packed for launches ---===//

#include "runtime/backend/CudaRelocationLayout.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using spanc::backend::buildCudaRelocationLayout;
using spanc::backend::CudaRelocationLayout;
using spanc::kv::RelocationOp;
using Batches = llvm::SmallVector<llvm::SmallVector<RelocationOp, 8>, 4>;

std::vector<int32_t> range(const int32_t *values, int64_t count) {
  return std::vector<int32_t>(values, values + count);
}

TEST(CudaRelocationLayout, BatchesKeepTheirOrderAndOneRangeEach) {
  // A duplicate (copy 2 -> 9) first, then a 3-cycle broken by CIDRA into a
  // batch of moves out of the temporary and an in-place rotation.
  Batches batches;
  batches.push_back({RelocationOp{2, 9, 0}, RelocationOp{4, 10, 32}});
  batches.push_back({});
  batches.push_back({RelocationOp{10, 4, -16}, RelocationOp{5, 5, 48}});
  CudaRelocationLayout layout;
  ASSERT_FALSE(bool(buildCudaRelocationLayout(batches, 16, layout)));
  EXPECT_EQ(layout.numBatches(), 2); // the empty batch is dropped
  EXPECT_EQ(layout.batchOffsets, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(range(layout.sources(), 4), (std::vector<int32_t>{2, 4, 10, 5}));
  EXPECT_EQ(range(layout.destinations(), 4),
            (std::vector<int32_t>{9, 10, 4, 5}));
  EXPECT_EQ(range(layout.deltas(), 4), (std::vector<int32_t>{0, 32, -16, 48}));
  EXPECT_EQ(layout.tokens(16), 64);
}

TEST(CudaRelocationLayout, OneSourceMayFeedSeveralDestinationsInABatch) {
  Batches batches;
  batches.push_back({RelocationOp{1, 2, 16}, RelocationOp{1, 3, 32}});
  CudaRelocationLayout layout;
  EXPECT_FALSE(bool(buildCudaRelocationLayout(batches, 4, layout)));
  EXPECT_EQ(layout.numOps(), 2);
}

std::string failure(const Batches &batches, int64_t numBlocks = 16) {
  CudaRelocationLayout layout;
  llvm::Error error = buildCudaRelocationLayout(batches, numBlocks, layout);
  return error ? llvm::toString(std::move(error)) : "";
}

TEST(CudaRelocationLayout, ABatchThatWouldRaceInOneLaunchIsRefused) {
  Batches writeThenRead;
  writeThenRead.push_back({RelocationOp{1, 2, 0}, RelocationOp{2, 3, 0}});
  EXPECT_EQ(failure(writeThenRead),
            "relocation batch 0, op 1: reads block 2 that the batch writes");
  Batches readThenWrite;
  readThenWrite.push_back({RelocationOp{2, 3, 0}, RelocationOp{1, 2, 0}});
  EXPECT_EQ(failure(readThenWrite), "relocation batch 0, op 1: writes block 2 "
                                    "that the batch also uses");
  Batches inPlaceRead;
  inPlaceRead.push_back({RelocationOp{2, 3, 0}, RelocationOp{2, 2, 16}});
  EXPECT_EQ(failure(inPlaceRead), "relocation batch 0, op 1: block 2 is used "
                                  "by another op of the batch");
}

TEST(CudaRelocationLayout, BlocksOutsideThePoolAndHugeDeltasAreRefused) {
  Batches outside;
  outside.push_back({RelocationOp{1, 16, 0}});
  EXPECT_EQ(failure(outside),
            "relocation batch 0, op 0: block 16 outside the pool's 16 blocks");
  Batches huge;
  huge.push_back({RelocationOp{1, 1, int64_t(1) << 40}});
  EXPECT_NE(failure(huge).find("does not fit 32 bits"), std::string::npos);
}

} // namespace
