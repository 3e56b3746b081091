//===- RelocationExecutorTest.cpp - Relocation through KvStorage, end to end
//===//
//
// Emulates the forward pass's K/V writes (K of token t = a fixed random
// vector of t, rotated with cpu::ropeAngles/rotateHead at the position the
// plan gives, as the forward pass does) and checks, after the manager's
// CIDRA step ran through the executor, that every block every request reads
// holds K rotated exactly at that request's positions (double reference,
// within keyErrorBound: the f32 arithmetic of the write and of each
// relocation, and with f16 storage each rounding to f16, turned along by
// the relocations after it) and the right V (exactly, or rounded once to
// f16): concurrent reuse of one span at offsets 0, 16 and 48 in one step,
// in-place relocation, and the decode copy-on-write.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/RelocationExecutor.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "test/unit/kernels/ErrorBounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

using namespace spanc;
using namespace spanc::kv;
using namespace spanc::backend;
using namespace spanc::test;

namespace {

constexpr int NumLayers = 3, NumKvHeads = 3, HeadDim = 64, BlockSize = 16;

/// A fixed pseudo-random value in [-1, 1) for (token, layer, head, dim,
/// which): K/V of a token depend on the token only (as span K/V do).
double rawValue(TokenId token, int layer, int head, int dim, int which) {
  uint64_t x = uint64_t(uint32_t(token)) * 0x9E3779B97F4A7C15ULL ^
               (uint64_t(layer) << 40) ^ (uint64_t(head) << 32) ^
               (uint64_t(dim) << 8) ^ uint64_t(which);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  return double(x >> 11) / double(1ULL << 52) - 1.0;
}

cpu::RopeConfig ropeConfig(cpu::RopeOrder order) {
  cpu::RopeConfig config;
  config.headDim = HeadDim;
  config.rotaryDim = HeadDim;
  config.order = order;
  config.theta = 100000.0f; // SmolLM2
  return config;
}

/// Writes the K/V of every token of `run` as the forward pass would.
void computeRun(KvStorage &storage, const cpu::RopeConfig &config,
                const RequestPlan &plan, const ComputeRun &run) {
  std::vector<float> keys(NumKvHeads * HeadDim), values(NumKvHeads * HeadDim);
  std::vector<float> cosSin(HeadDim);
  for (uint32_t block = run.firstBlock; block < run.firstBlock + run.numBlocks;
       ++block) {
    const LogicalBlock &logical = plan.blocks[block];
    for (uint32_t slot = 0; slot < logical.numTokens; ++slot) {
      TokenId token = plan.tokens[logical.firstToken + slot];
      cpu::ropeAngles(config, double(logical.position + slot), cosSin.data(),
                      cosSin.data() + HeadDim / 2);
      for (int layer = 0; layer < NumLayers; ++layer) {
        for (int head = 0; head < NumKvHeads; ++head) {
          for (int dim = 0; dim < HeadDim; ++dim) {
            keys[head * HeadDim + dim] =
                float(rawValue(token, layer, head, dim, 0));
            values[head * HeadDim + dim] =
                float(rawValue(token, layer, head, dim, 1));
          }
          cpu::rotateHead(config.order, HeadDim, cosSin.data(),
                          keys.data() + head * HeadDim, 1);
        }
        storage.writeToken(layer, logical.block, int(slot), keys.data(),
                           values.data());
      }
    }
  }
}

void computeAll(KvStorage &storage, const cpu::RopeConfig &config,
                const RequestPlan &plan) {
  for (const ComputeRun &run : plan.runs)
    computeRun(storage, config, plan, run);
}

/// The spacing of IEEE halves around |x|.
double halfUlp(double x) {
  int exponent;
  std::frexp(std::max(std::abs(x), std::ldexp(1.0, -14)), &exponent);
  return std::ldexp(1.0, exponent - 1 - 10);
}

/// The bound of one K element of a pair of norm r (a rotation keeps it)
/// turned to `angle`, after the write and `relocations` relocations, as a
/// bound on the pair's error vector (which later rotations turn but do not
/// grow), so on each element:
///  - the raw value rounded to f32 for the write: u r;
///  - the write (ropeAngles, rotateHead) and each relocation (Rerope.cpp):
///    f32 cos/sin of a double angle (u each, and the angle's few double
///    roundings, 4 * 2^-53 |angle|) and two roundings of |a c| + |b s|:
///    3u (|a| + |b|) per element, at most 3u sqrt(2) r, so 6u r (and the
///    angle's share) on the pair;
///  - with f16 storage, each rounding to f16 after the write and each
///    relocation: half an f16 ulp of each element, of the last one as it
///    is, of each earlier one turned: sqrt(2) / 2 f16 ulps of r.
double keyErrorBound(double norm, double angle, int relocations, bool half) {
  const double steps = 1 + relocations;
  const double arithmetic = (kUnitRoundoff + steps * 6 * kUnitRoundoff +
                             steps * 8 * kDoubleRoundoff * std::abs(angle)) *
                            norm;
  if (!half)
    return arithmetic;
  return (0.5 + relocations * std::sqrt(0.5)) * halfUlp(norm + arithmetic) +
         arithmetic;
}

/// Worst error of every valid K/V slot of the request's blocks against the
/// raw vectors rotated in double at the request's positions, in units of
/// what the storage precision allows (<= 1 passes). `relocations`: the most
/// times any of the blocks was relocated since its K was written.
double maxError(const KvStorage &storage, cpu::RopeOrder order,
                const RequestPlan &plan, int relocations) {
  const double theta = 100000.0;
  const bool half = storage.precision() == cpu::KvPrecision::F16;
  double worst = 0;
  for (const LogicalBlock &block : plan.blocks)
    for (uint32_t slot = 0; slot < block.numTokens; ++slot) {
      TokenId token = plan.tokens[block.firstToken + slot];
      double position = double(block.position + slot);
      for (int layer = 0; layer < NumLayers; ++layer)
        for (int head = 0; head < NumKvHeads; ++head) {
          for (int pair = 0; pair < HeadDim / 2; ++pair) {
            int first = order == cpu::RopeOrder::Normal ? 2 * pair : pair;
            int second = order == cpu::RopeOrder::Normal ? 2 * pair + 1
                                                         : pair + HeadDim / 2;
            double angle = position * std::pow(theta, -2.0 * pair / HeadDim);
            double a = rawValue(token, layer, head, first, 0);
            double b = rawValue(token, layer, head, second, 0);
            double expectedFirst = a * std::cos(angle) - b * std::sin(angle);
            double expectedSecond = a * std::sin(angle) + b * std::cos(angle);
            double allowed =
                keyErrorBound(std::hypot(a, b), angle, relocations, half);
            worst =
                std::max(worst, std::abs(storage.key(layer, block.block, head,
                                                     int(slot), first) -
                                         expectedFirst) /
                                    allowed);
            worst =
                std::max(worst, std::abs(storage.key(layer, block.block, head,
                                                     int(slot), second) -
                                         expectedSecond) /
                                    allowed);
          }
          for (int dim = 0; dim < HeadDim; ++dim) {
            double raw = rawValue(token, layer, head, dim, 1);
            // V is written as float(raw), rounded once more to f16 where
            // stored so, and relocations copy it bit for bit.
            double allowed = half ? 0.5 * halfUlp(float(raw)) : 0.0;
            double error = std::abs(
                storage.value(layer, block.block, head, int(slot), dim) -
                float(raw));
            worst = std::max(worst, error == 0 ? 0.0 : error / allowed);
          }
        }
    }
  return worst;
}

std::vector<TokenId> tokens(int count, TokenId first) {
  std::vector<TokenId> result(static_cast<size_t>(count));
  std::iota(result.begin(), result.end(), first);
  return result;
}

class Executor : public ::testing::TestWithParam<
                     std::tuple<cpu::RopeOrder, cpu::KvPrecision>> {};

TEST_P(Executor, EveryRequestReadsItsSpanAtItsOwnPositions) {
  const cpu::RopeOrder order = std::get<0>(GetParam());
  const cpu::RopeConfig config = ropeConfig(order);
  KvStorageConfig shape{NumLayers,
                        NumKvHeads,
                        HeadDim,
                        BlockSize,
                        64,
                        true,
                        std::get<1>(GetParam())};
  auto storage = KvStorage::create(shape);
  ASSERT_TRUE(bool(storage)) << llvm::toString(storage.takeError());
  BlockPool pool(64, BlockSize);
  // Isolated spans: the request positions differ while the stored span is
  // one and the same.
  KvCacheManager manager(pool, BlockHasher("test-model"), CacheMode::Span,
                         RelocationMode::Rerope,
                         SpanOptions{SpanContext::Isolated, 0, 0});
  RelocationExecutor executor(**storage, config);
  const std::vector<TokenId> document = tokens(40, 5000);

  auto step = [&](llvm::ArrayRef<RequestId> ids) {
    auto plan = manager.planStep();
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    ASSERT_TRUE(plan->deferred.empty());
    executor.apply(plan->relocation);
    manager.finishStep(*plan);
    for (RequestId id : ids) {
      computeAll(**storage, config, manager.plan(id));
      manager.commitPrefill(id);
    }
  };
  double largestRatio = 0;
  auto check = [&](const RequestPlan &plan, int relocations) {
    const double ratio = maxError(**storage, order, plan, relocations);
    largestRatio = std::max(largestRatio, ratio);
    return ratio;
  };
  auto admit = [&](RequestId id, std::vector<Segment> segments) {
    AdmitResult result = manager.admit(id, segments);
    ASSERT_EQ(result.status, AdmitStatus::Admitted) << result.reason;
  };

  // Request 1 computes the span at offset 0 and keeps reading it there.
  admit(1, {{SegmentKind::Span, document}, {SegmentKind::Tail, {1, 2}}});
  step({1});
  EXPECT_LE(check(manager.plan(1), 0), 1.0);

  // Requests 2 and 3 reuse it at offsets 16 and 48 in one step.
  admit(2, {{SegmentKind::Prefix, tokens(16, 1)},
            {SegmentKind::Span, document},
            {SegmentKind::Tail, {3}}});
  admit(3, {{SegmentKind::Prefix, tokens(48, 1)},
            {SegmentKind::Span, document},
            {SegmentKind::Tail, {4}}});
  step({2, 3});
  for (RequestId id : {1, 2, 3}) {
    SCOPED_TRACE("request " + std::to_string(id));
    // Requests 2 and 3 read copies relocated once.
    EXPECT_LE(check(manager.plan(id), 1), 1.0);
  }
  EXPECT_EQ(manager.plan(3).segments[1].firstPosition, 48);
  EXPECT_EQ(manager.plan(2).numReusedTokens, 40u);
  EXPECT_EQ(manager.plan(3).numReusedTokens, 40u);

  // Everyone leaves; request 4 takes the span at offset 5: in place now.
  for (RequestId id : {1, 2, 3})
    manager.release(id);
  admit(4, {{SegmentKind::Prefix, tokens(5, 1)},
            {SegmentKind::Span, document},
            {SegmentKind::Tail, tokens(20, 77)}});
  step({4});
  // The original blocks, relocated in place once.
  EXPECT_LE(check(manager.plan(4), 1), 1.0);

  // Decode: the tail's cached partial block is copied, then written.
  auto slot = manager.appendToken(4, 42);
  ASSERT_TRUE(bool(slot)) << llvm::toString(slot.takeError());
  ASSERT_TRUE(slot->copy.has_value());
  executor.prepare(*slot);
  const RequestPlan &plan = manager.plan(4);
  ComputeRun decode;
  decode.firstBlock = uint32_t(plan.blocks.size()) - 1;
  decode.numBlocks = 1;
  computeRun(**storage, config, plan, decode);
  EXPECT_EQ(plan.blocks.back().numTokens, 5u);
  EXPECT_LE(check(plan, 1), 1.0);
  std::printf("%s path, %s storage: largest error %.3g of its bound\n",
              cpu::isaLevelName(cpu::isaLevel()),
              std::get<1>(GetParam()) == cpu::KvPrecision::F16 ? "f16" : "f32",
              largestRatio);
}

INSTANTIATE_TEST_SUITE_P(
    BothOrdersBothPrecisions, Executor,
    ::testing::Combine(
        ::testing::Values(cpu::RopeOrder::Normal, cpu::RopeOrder::NeoX),
        ::testing::Values(cpu::KvPrecision::F32, cpu::KvPrecision::F16)));

TEST(RelocationFrequencies, ReproduceRopeAnglesUnderEveryScaling) {
  std::vector<cpu::RopeConfig> configs(4, ropeConfig(cpu::RopeOrder::Normal));
  configs[1].scaling = cpu::RopeScaling::Linear;
  configs[1].factor = 4.0f;
  configs[2].scaling = cpu::RopeScaling::Yarn;
  configs[2].factor = 8.0f;
  configs[2].originalContext = 4096;
  configs[2].attentionFactor = 1.3f; // scales, never turns: not a frequency
  configs[3].freqFactors.assign(HeadDim / 2, 1.0f);
  for (int pair = 0; pair < HeadDim / 2; ++pair)
    configs[3].freqFactors[size_t(pair)] = 1.0f + float(pair) / 8.0f;
  for (size_t index = 0; index < configs.size(); ++index) {
    const cpu::RopeConfig &config = configs[index];
    std::vector<double> frequencies = relocationFrequencies(config);
    std::vector<float> cosValues(HeadDim / 2), sinValues(HeadDim / 2);
    for (double position : {1.0, 17.0, 1000.0, 8191.0}) {
      cpu::ropeAngles(config, position, cosValues.data(), sinValues.data());
      for (int pair = 0; pair < HeadDim / 2; ++pair) {
        double magnitude =
            std::hypot(double(cosValues[pair]), double(sinValues[pair]));
        double angle = position * frequencies[size_t(pair)];
        // Each entry is rounded to f32 once (u of it), which moves the
        // magnitude they give by u of it: 2u of the normalized entry. The
        // two double angles differ by a few roundings of their largest
        // term, position times an unscaled frequency (at most 1).
        const double allowed =
            2 * kUnitRoundoff + 8 * kDoubleRoundoff * position;
        EXPECT_NEAR(cosValues[pair] / magnitude, std::cos(angle), allowed)
            << "config " << index << " position " << position << " pair "
            << pair;
        EXPECT_NEAR(sinValues[pair] / magnitude, std::sin(angle), allowed)
            << "config " << index << " position " << position << " pair "
            << pair;
      }
    }
  }
}

} // namespace
