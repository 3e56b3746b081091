//===- KvCacheManagerTestSupport.h - What the kv manager tests share -----===//
//
// Token and segment builders, a pool check, a fixture and plan probes for
// KvCacheManagerTest.cpp and KvCacheManagerSpanTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_UNIT_KV_KVCACHEMANAGERTESTSUPPORT_H
#define SPANC_TEST_UNIT_KV_KVCACHEMANAGERTESTSUPPORT_H

#include "runtime/kv/KvCacheManager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace spanc::kv::testing {

constexpr unsigned BlockSize = 16;

#define ASSERT_POOL_OK(pool)                                                   \
  do {                                                                         \
    llvm::Error error = (pool).verify();                                       \
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));             \
  } while (0)

inline std::vector<TokenId> tokens(int count, TokenId first) {
  std::vector<TokenId> result(static_cast<size_t>(count));
  std::iota(result.begin(), result.end(), first);
  return result;
}

inline Segment prefix(std::vector<TokenId> ids) {
  return {SegmentKind::Prefix, std::move(ids)};
}
inline Segment span(std::vector<TokenId> ids) {
  return {SegmentKind::Span, std::move(ids)};
}
inline Segment tail(std::vector<TokenId> ids) {
  return {SegmentKind::Tail, std::move(ids)};
}

/// Admits, runs the step's relocation planning, and "computes" the prefill.
inline void run(KvCacheManager &manager, RequestId id,
                llvm::ArrayRef<Segment> segments) {
  AdmitResult result = manager.admit(id, segments);
  ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
  auto step = manager.planStep();
  ASSERT_TRUE(bool(step)) << llvm::toString(step.takeError());
  manager.finishStep(*step);
  manager.commitPrefill(id);
}

inline llvm::SmallVector<BlockHash, 8> segmentHashes(const RequestPlan &plan,
                                                     uint32_t segment) {
  llvm::SmallVector<BlockHash, 8> hashes;
  const SegmentPlan &segmentPlan = plan.segments[segment];
  for (uint32_t i = 0; i < segmentPlan.numBlocks; ++i)
    hashes.push_back(plan.blocks[segmentPlan.firstBlock + i].hash);
  return hashes;
}

inline uint32_t reusedBlocks(const RequestPlan &plan, uint32_t segment) {
  const SegmentPlan &segmentPlan = plan.segments[segment];
  uint32_t count = 0;
  for (uint32_t i = 0; i < segmentPlan.numBlocks; ++i)
    count += plan.blocks[segmentPlan.firstBlock + i].reused;
  return count;
}

/// Isolated spans unless told otherwise: most tests here pin the block
/// mechanics of spans that hash from the root; SpanContext::Prefix has its
/// own tests below.
inline const SpanOptions Isolated{SpanContext::Isolated, 0, 0};

struct Fixture {
  BlockPool pool;
  KvCacheManager manager;
  Fixture(uint32_t numBlocks, CacheMode cacheMode,
          RelocationMode relocation = RelocationMode::Rerope,
          const SpanOptions &spanOptions = Isolated)
      : pool(numBlocks, BlockSize),
        manager(pool, BlockHasher("smollm2-test"), cacheMode, relocation,
                spanOptions) {}
};

} // namespace spanc::kv::testing

#endif // SPANC_TEST_UNIT_KV_KVCACHEMANAGERTESTSUPPORT_H
