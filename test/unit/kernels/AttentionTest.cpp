//===- AttentionTest.cpp - Paged attention against dense masked softmax ---===//
//
// Every case builds page lists over a KvStorage (f32 and f16 elements), runs
// the kernel (AVX-512, AMX where the CPU has it, and scalar paths; the
// target runs once per kernel path, bazel/isa.bzl) and compares each output
// element with a dense reference in double precision that sees only the
// logical tokens of its sequence, causally, with GQA head sharing. With f16
// storage the reference reads the K/V the storage holds (each value rounded
// to half), so storage is no source of error: every path must compute
// exactly on what is stored.
//
// Each element is held to a bound derived from the path's arithmetic
// (errorBound below), not to a constant that happened to pass on one host:
// a score error dS_j moves the output by sum_j p_j dS_j (v_j - out) to first
// order, and the f32 sums of P.V add a rounding error of their own. The
// AMX path is less accurate by design (bf16 high/low parts: ~16 bits per
// product instead of 24) and is held to its own, larger bound. Every case
// also runs pagedAttentionInTeam in a two-thread region, and (planned once)
// pagedAttentionPlannedInTeam twice: the same results.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Attention.h"
#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/CpuFeatures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace spanc;
using namespace spanc::cpu;

/// The unit roundoff of f32.
constexpr double kUnitRoundoff = 0x1p-24;
/// The probabilistic rounding-error bound of a sum of n terms is
/// lambda * sqrt(n) * u * sum |terms| (Higham and Mary, SIAM J. Sci. Comput.
/// 41(5), 2019), holding with probability at least 1 - 2 exp(-lambda^2/2)
/// per sum: 1 - 2.5e-14 at lambda = 8. The worst case (n * u) is never
/// reached by rounding to nearest over random data and would hide bugs.
constexpr double kLambda = 8;
/// The relative error of exp512 (VectorMath.h: a degree-7 polynomial,
/// below 1e-7 on its range) and of std::exp (about one unit roundoff).
constexpr double kExpError = 1e-7 + kUnitRoundoff;
/// The AMX path's exp2 of a weight (AttentionAmx.cpp: a degree-3
/// polynomial in the reduced argument, 8.6e-5, plus its few roundings; the
/// correction's degree-6 one is far below it).
constexpr double kAmxWeightExpError = 1.1e-4 + 4 * kUnitRoundoff;
/// The AMX path's weights P as P.V uses them: (1 + 2^-8) times the weight,
/// truncated to bf16 (8 significant bits: down by less than 2^-7 of it),
/// are within 2^-8 + 2^-15 of it either way (the common factor cancels in
/// the normalization).
constexpr double kBf16RoundingError = 0x1p-8 + 0x1p-15;
/// bf16 keeps 8 significant bits: rounding to nearest moves a value by at
/// most 2^-8 of it (1 + 2^-8 is a tie), and rounding that rest to bf16
/// leaves 2^-8 of the rest: 2^-16 of the value. (Not 2^-9 and 2^-18: that
/// is bf16's spacing, 2^-7 at 1, halved twice.)
constexpr double kBf16SplitError = 0x1p-16;
/// Second-order terms the first-order bound leaves out, and the merge of
/// split partial states (a few roundings each): a factor of two covers
/// them with room.
constexpr double kHigherOrder = 2;

/// The arithmetic of one kernel path, as the bound sees it.
struct PathArithmetic {
  /// Relative error of a score q.k, against scale * sum_d |q_d k_d|.
  double dot;
  /// Relative error of one softmax weight as P.V uses it (exp, and on the
  /// AMX path the bf16 rounding of P; the normalizer sums the same weights).
  double weight;
};

/// f32 products (scalar and AVX-512): each product and the scaling of q
/// rounded once, the headDim-term sum probabilistically.
PathArithmetic f32Products(int headDim) {
  return {(kLambda * std::sqrt(double(headDim)) + 2) * kUnitRoundoff,
          kExpError + 4 * kUnitRoundoff};
}

/// AMX: Qh.Kh + Qh.Kl + Ql.Kh, each operand's low part rounded to bf16
/// (2^-16 of the operand each, q and k; f16 K splits exactly, but the
/// bound does not lean on it) and Ql.Kl dropped (2^-16 of the product):
/// 3 * 2^-16 per product, then an f32 sum of 3 * headDim terms. P is
/// rounded to bf16 (2^-8 per weight; the normalizer sums the same rounded
/// weights).
PathArithmetic amxProducts(int headDim) {
  return {3 * kBf16SplitError +
              (kLambda * std::sqrt(3.0 * headDim) + 2) * kUnitRoundoff,
          kAmxWeightExpError + kBf16RoundingError + 4 * kUnitRoundoff};
}

struct TestSequence {
  std::vector<int32_t> blockIds;
  std::vector<int32_t> validTokens;
  int numQueries = 0;
  /// Per page, nonzero for parallel-encoded context (SpanScaling); empty:
  /// none.
  std::vector<uint8_t> spanPages;
  SpanScaling scaling;
};

struct Case {
  int numQueryHeads = 6;
  int numKvHeads = 2;
  int headDim = 64;
  int blockSize = 16;
  int64_t numBlocks = 64;
  bool ropeInKernel = false;
  RopeOrder ropeOrder = RopeOrder::Normal;
  std::vector<TestSequence> sequences;
  /// Per block, a factor on its random keys (empty: 1 everywhere).
  std::vector<float> blockKeyGain;
};

/// Fills every slot of every block with random K/V and runs the kernel and
/// the reference on the case's sequences.
/// Returns the largest ratio of an element's difference from the reference
/// to its bound (1 at the bound); `result` (if set) receives the kernel's
/// output.
double runCaseWith(const Case &testCase, bool forceScalar, int minPagesPerSplit,
                   KvPrecision precision, bool allowAmx = false,
                   std::vector<float> *result = nullptr) {
  SCOPED_TRACE(precision == KvPrecision::F16 ? "f16 storage" : "f32 storage");
  SCOPED_TRACE(allowAmx ? "amx allowed" : "f32 products");
  double largestRatio = 0;
  backend::KvStorageConfig config;
  config.precision = precision;
  config.numLayers = 2;
  config.numKvHeads = testCase.numKvHeads;
  config.headDim = testCase.headDim;
  config.blockSize = testCase.blockSize;
  config.numBlocks = testCase.numBlocks;
  config.keysRotated = !testCase.ropeInKernel;
  auto storageOrError = backend::KvStorage::create(config);
  if (!storageOrError) {
    ADD_FAILURE() << llvm::toString(storageOrError.takeError());
    return 0;
  }
  backend::KvStorage &storage = **storageOrError;
  const int layer = 1;
  const int kvWidth = testCase.numKvHeads * testCase.headDim;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // keyOf[block][slot] / valueOf: the token-major copy the reference reads.
  std::vector<std::vector<float>> keyOf(
      size_t(testCase.numBlocks * testCase.blockSize)),
      valueOf(keyOf.size());
  for (int64_t block = 0; block < testCase.numBlocks; ++block)
    for (int slot = 0; slot < testCase.blockSize; ++slot) {
      std::vector<float> key(static_cast<size_t>(kvWidth)),
          value(static_cast<size_t>(kvWidth));
      for (float &x : key)
        x = normal(rng);
      for (float &x : value)
        x = normal(rng);
      if (!testCase.blockKeyGain.empty())
        for (float &x : key)
          x *= testCase.blockKeyGain[size_t(block)];
      storage.writeToken(layer, block, slot, key.data(), value.data());
      if (precision == KvPrecision::F16)
        for (int index = 0; index < kvWidth; ++index) {
          key[size_t(index)] = halfToFloat(floatToHalf(key[size_t(index)]));
          value[size_t(index)] = halfToFloat(floatToHalf(value[size_t(index)]));
        }
      keyOf[size_t(block * testCase.blockSize + slot)] = key;
      valueOf[size_t(block * testCase.blockSize + slot)] = value;
    }

  RopeConfig ropeConfig;
  ropeConfig.headDim = ropeConfig.rotaryDim = testCase.headDim;
  ropeConfig.theta = 10000.0f;
  ropeConfig.order = testCase.ropeOrder;
  RopeTable ropeTable(ropeConfig, 1024);

  std::vector<int32_t> queryOffsets = {0}, pageOffsets = {0}, blockIds,
                       validTokens;
  std::vector<uint8_t> spanPages;
  std::vector<SpanScaling> scalings;
  bool anyScaling = false;
  for (const TestSequence &sequence : testCase.sequences) {
    anyScaling |= !sequence.spanPages.empty();
    for (size_t page = 0; page < sequence.blockIds.size(); ++page)
      spanPages.push_back(
          sequence.spanPages.empty() ? 0 : sequence.spanPages[page]);
    scalings.push_back(sequence.scaling);
    queryOffsets.push_back(queryOffsets.back() + sequence.numQueries);
    pageOffsets.push_back(pageOffsets.back() +
                          int32_t(sequence.blockIds.size()));
    blockIds.insert(blockIds.end(), sequence.blockIds.begin(),
                    sequence.blockIds.end());
    validTokens.insert(validTokens.end(), sequence.validTokens.begin(),
                       sequence.validTokens.end());
  }
  const int64_t queryWidth = int64_t(testCase.numQueryHeads) * testCase.headDim;
  const int64_t queryStride = queryWidth + 3, outputStride = queryWidth + 5;
  const int totalQueries = queryOffsets.back();
  std::vector<float> queries(size_t(totalQueries * queryStride));
  for (float &x : queries)
    x = normal(rng);
  std::vector<float> output(size_t(totalQueries * outputStride), 0.0f);

  PagedAttentionShape shape;
  shape.numQueryHeads = testCase.numQueryHeads;
  shape.numKvHeads = testCase.numKvHeads;
  shape.headDim = testCase.headDim;
  shape.scale = 1.0f / std::sqrt(float(testCase.headDim));
  shape.queryRowStride = queryStride;
  shape.outputRowStride = outputStride;
  PagedAttentionBatch batch;
  batch.numSequences = int(testCase.sequences.size());
  batch.queryOffsets = queryOffsets.data();
  batch.pageOffsets = pageOffsets.data();
  batch.blockIds = blockIds.data();
  batch.validTokens = validTokens.data();
  if (anyScaling) {
    batch.spanPages = spanPages.data();
    batch.spanScaling = scalings.data();
  }
  PagedAttentionOptions options;
  options.forceScalar = forceScalar;
  options.allowAmx = allowAmx;
  options.minPagesPerSplit = minPagesPerSplit;
  options.keyRope = testCase.ropeInKernel ? &ropeTable : nullptr;
  // The kernel's choice, restated (Attention.cpp): AMX tiles for f16 K/V
  // and sequences of several queries where the CPU and the cap allow them.
  const bool amxShape = !forceScalar && allowAmx && amxBf16Usable() &&
                        precision == KvPrecision::F16 &&
                        testCase.blockSize == 16 && testCase.headDim % 32 == 0;
  AttentionWorkspace workspace;
  // Twice: a reused workspace must give the same answer.
  for (int round = 0; round < 2; ++round)
    pagedAttention(shape, batch, storage.layerView(layer), queries.data(),
                   output.data(), options, workspace);
  // The same call by a running team (a decode step's layers in one
  // region): the same results, whatever thread folds which pass.
  std::vector<float> teamOutput(output.size(), 0.0f);
  AttentionWorkspace teamWorkspace;
#pragma omp parallel num_threads(2)
  pagedAttentionInTeam(shape, batch, storage.layerView(layer), queries.data(),
                       teamOutput.data(), options, teamWorkspace);
  EXPECT_TRUE(teamOutput == output) << "pagedAttentionInTeam";
  // And planned once for two layers' calls (a decode step's).
  const PagedAttentionPlan plan = planPagedAttention(
      shape, batch, storage.layerView(layer), options, teamWorkspace, 2);
  EXPECT_EQ(plan.blockCache, nullptr);
  for (int call = 0; call < 2; ++call) {
    std::fill(teamOutput.begin(), teamOutput.end(), 0.0f);
#pragma omp parallel num_threads(2)
    pagedAttentionPlannedInTeam(plan, shape, batch, storage.layerView(layer),
                                queries.data(), teamOutput.data(), options,
                                teamWorkspace);
    EXPECT_TRUE(teamOutput == output) << "pagedAttentionPlannedInTeam";
  }

  const int groupSize = testCase.numQueryHeads / testCase.numKvHeads;
  for (size_t index = 0; index < testCase.sequences.size(); ++index) {
    const TestSequence &sequence = testCase.sequences[index];
    // The logical tokens: valid slots in page order.
    std::vector<const std::vector<float> *> keys, values;
    // Each key's kind: 1 for a span page's (scaled), 0 for the others.
    std::vector<int> kinds;
    for (size_t page = 0; page < sequence.blockIds.size(); ++page)
      for (int slot = 0; slot < sequence.validTokens[page]; ++slot) {
        size_t flat =
            size_t(sequence.blockIds[page] * testCase.blockSize + slot);
        keys.push_back(&keyOf[flat]);
        values.push_back(&valueOf[flat]);
        kinds.push_back(!sequence.spanPages.empty() &&
                        sequence.spanPages[page] != 0);
      }
    const int64_t length = int64_t(keys.size());
    const PathArithmetic arithmetic = amxShape && sequence.numQueries > 1
                                          ? amxProducts(testCase.headDim)
                                          : f32Products(testCase.headDim);
    for (int query = 0; query < sequence.numQueries; ++query) {
      int64_t limit = length - sequence.numQueries + query;
      int64_t row = queryOffsets[index] + query;
      for (int head = 0; head < testCase.numQueryHeads; ++head) {
        int kvHead = head / groupSize;
        const float *q =
            queries.data() + row * queryStride + head * testCase.headDim;
        std::vector<double> scores(size_t(limit + 1));
        // Each score's error bound: the dot's, relative to sum |q_d k_d|
        // times its scale, plus the weight's own (exp, bf16 rounding).
        std::vector<double> scoreErrors(size_t(limit + 1));
        double kindMax[2] = {-1e300, -1e300};
        for (int64_t key = 0; key <= limit; ++key) {
          std::vector<float> k(
              keys[size_t(key)]->begin() + kvHead * testCase.headDim,
              keys[size_t(key)]->begin() + (kvHead + 1) * testCase.headDim);
          if (testCase.ropeInKernel)
            rotateHead(ropeConfig.order, ropeConfig.rotaryDim,
                       ropeTable.row(key), k.data(), 1);
          double dot = 0, absoluteDot = 0;
          for (int dim = 0; dim < testCase.headDim; ++dim) {
            dot += double(q[dim]) * k[size_t(dim)];
            absoluteDot += std::abs(double(q[dim]) * k[size_t(dim)]);
          }
          const int kind = kinds[size_t(key)];
          const double keyScale =
              shape.scale / (kind ? sequence.scaling.temperature : 1.0);
          scores[size_t(key)] = dot * keyScale;
          scoreErrors[size_t(key)] =
              arithmetic.dot * absoluteDot * keyScale + arithmetic.weight;
          kindMax[kind] = std::max(kindMax[kind], scores[size_t(key)]);
        }
        // Each kind's softmax on its own, then the kinds weighed by their
        // masses, the span kind's log-sum-exp times massScale (with one
        // kind this is the plain softmax).
        double kindSum[2] = {0, 0};
        for (int64_t key = 0; key <= limit; ++key) {
          const int kind = kinds[size_t(key)];
          kindSum[kind] += (scores[size_t(key)] =
                                std::exp(scores[size_t(key)] - kindMax[kind]));
        }
        double mass[2];
        for (int kind = 0; kind < 2; ++kind)
          mass[kind] = kindSum[kind] > 0
                           ? kindMax[kind] + std::log(kindSum[kind])
                           : -1e300;
        if (kindSum[1] > 0)
          mass[1] *= sequence.scaling.massScale;
        const double top = std::max(mass[0], mass[1]);
        double kindWeight[2];
        for (int kind = 0; kind < 2; ++kind)
          kindWeight[kind] =
              kindSum[kind] > 0 ? std::exp(mass[kind] - top) : 0.0;
        const double weightTotal = kindWeight[0] + kindWeight[1];
        // A kind's log-sum-exp moves by at most its softmax-weighted score
        // error (its gradient is that softmax); the span kind's by
        // massScale times that.
        double massError[2] = {0, 0};
        for (int64_t key = 0; key <= limit; ++key) {
          const int kind = kinds[size_t(key)];
          massError[kind] +=
              scores[size_t(key)] / kindSum[kind] * scoreErrors[size_t(key)];
        }
        massError[1] *= std::abs(sequence.scaling.massScale);
        for (int dim = 0; dim < testCase.headDim; ++dim) {
          auto value = [&](int64_t key) {
            return double((
                *values[size_t(key)])[size_t(kvHead * testCase.headDim + dim)]);
          };
          double expected = 0, kindOutput[2] = {0, 0};
          for (int64_t key = 0; key <= limit; ++key) {
            const int kind = kinds[size_t(key)];
            const double withinKind = scores[size_t(key)] / kindSum[kind];
            kindOutput[kind] += withinKind * value(key);
            expected +=
                withinKind * kindWeight[kind] / weightTotal * value(key);
          }
          // errorBound: the score errors through the softmax (within each
          // kind, then between the kinds' masses), the f32 sums of P.V over
          // `limit + 1` keys with one rescale per page, and the final
          // division.
          double withinKinds = 0, magnitude = 0;
          for (int64_t key = 0; key <= limit; ++key) {
            const int kind = kinds[size_t(key)];
            const double weight = scores[size_t(key)] / kindSum[kind] *
                                  kindWeight[kind] / weightTotal;
            withinKinds += weight * scoreErrors[size_t(key)] *
                           std::abs(value(key) - kindOutput[kind]);
            magnitude += weight * std::abs(value(key));
          }
          const double share0 = kindWeight[0] / weightTotal,
                       share1 = kindWeight[1] / weightTotal;
          const double betweenKinds = (massError[0] + massError[1]) * share0 *
                                      share1 *
                                      std::abs(kindOutput[1] - kindOutput[0]);
          const double sums = (kLambda * std::sqrt(double(limit + 1)) +
                               double(sequence.blockIds.size()) + 2) *
                              kUnitRoundoff * magnitude;
          const double bound =
              kHigherOrder * (withinKinds + betweenKinds + sums) +
              2 * kUnitRoundoff * std::abs(expected);
          const float actual = output[size_t(row * outputStride +
                                             head * testCase.headDim + dim)];
          largestRatio =
              std::max(largestRatio, std::abs(actual - expected) / bound);
          EXPECT_NEAR(actual, expected, bound)
              << "sequence " << index << " query " << query << " head " << head
              << " dim " << dim << " (" << isaLevelName(isaLevel())
              << (forceScalar ? ", forced scalar" : "")
              << (arithmetic.dot > f32Products(testCase.headDim).dot
                      ? ", amx tiles"
                      : ", f32 products")
              << ")";
        }
      }
    }
  }
  if (result)
    *result = output;
  return largestRatio;
}

void runCase(const Case &testCase, bool forceScalar, int minPagesPerSplit = 0) {
  for (KvPrecision precision : {KvPrecision::F32, KvPrecision::F16})
    std::printf(
        "%s path%s, %s K/V: largest error %.3g of its bound\n",
        isaLevelName(isaLevel()), forceScalar ? " (forced scalar)" : "",
        precision == KvPrecision::F16 ? "f16" : "f32",
        runCaseWith(testCase, forceScalar, minPagesPerSplit, precision));
  if (!forceScalar && amxBf16Usable()) {
    // The AMX path where the shape takes it (f32 products otherwise): held
    // to its own bound, and its bits must show that it ran.
    // (Single-query sequences keep f32 products.)
    bool severalQueries = false;
    for (const TestSequence &sequence : testCase.sequences)
      severalQueries |= sequence.numQueries > 1;
    const bool amxShape = testCase.blockSize == 16 &&
                          testCase.headDim % 32 == 0 && severalQueries;
    std::vector<float> amx, f32;
    const double ratio = runCaseWith(testCase, false, minPagesPerSplit,
                                     KvPrecision::F16, /*allowAmx=*/true, &amx);
    std::printf("AMX path: largest error %.3g of its bound\n", ratio);
    runCaseWith(testCase, false, minPagesPerSplit, KvPrecision::F16,
                /*allowAmx=*/false, &f32);
    ASSERT_EQ(amx.size(), f32.size());
    EXPECT_EQ(amxShape, std::memcmp(amx.data(), f32.data(),
                                    amx.size() * sizeof(float)) != 0);
  }
}

TestSequence contiguous(int firstBlock, int numTokens, int numQueries,
                        int blockSize = 16) {
  TestSequence sequence;
  for (int start = 0; start < numTokens; start += blockSize) {
    sequence.blockIds.push_back(firstBlock++);
    sequence.validTokens.push_back(std::min(blockSize, numTokens - start));
  }
  sequence.numQueries = numQueries;
  return sequence;
}

TEST(PagedAttention, PrefillOfOneContiguousSequenceIsCausal) {
  Case testCase;
  testCase.sequences = {contiguous(0, 77, 77)};
  runCase(testCase, false);
  runCase(testCase, true);
}

TEST(PagedAttention, ScoresThatJumpLateRescaleTheFold) {
  // Keys 8 times larger from the sixth block on and 40 times from the
  // eleventh: rows that see them meet scores far above every earlier one
  // (tens of log2 units, then more than 127: a weight taken against the
  // earlier max would overflow), so a fold's max moves mid-way, past the
  // lead the AMX path lets it take before rescaling (kMaxLead).
  Case testCase;
  testCase.blockKeyGain.assign(size_t(testCase.numBlocks), 1.0f);
  for (size_t block = 5; block < testCase.blockKeyGain.size(); ++block)
    testCase.blockKeyGain[block] = block < 10 ? 8.0f : 40.0f;
  testCase.sequences = {contiguous(0, 300, 40), contiguous(30, 200, 1)};
  runCase(testCase, false);
  runCase(testCase, true);
}

TEST(PagedAttention, DecodeBatchOfSeveralSequencesWithGqa) {
  Case testCase;
  testCase.numQueryHeads = 9;
  testCase.numKvHeads = 3;
  testCase.sequences = {contiguous(0, 40, 1), contiguous(3, 1, 1),
                        contiguous(4, 130, 1)};
  runCase(testCase, false);
  runCase(testCase, true);
}

TEST(PagedAttention, PaddingSlotsTakeNoPositionAndBlocksAreShared) {
  // Span-style page lists: partial blocks in the middle (padding) and one
  // block read by two sequences at different logical offsets.
  Case testCase;
  TestSequence first;
  first.blockIds = {5, 2, 9, 11};
  first.validTokens = {16, 7, 3, 12};
  first.numQueries = 12;
  TestSequence second;
  second.blockIds = {9, 2, 0};
  second.validTokens = {3, 7, 5};
  second.numQueries = 5;
  TestSequence third;
  third.blockIds = {1, 4, 6};
  third.validTokens = {0, 16, 16}; // an empty page is skipped too
  third.numQueries = 20;
  testCase.sequences = {first, second, third};
  runCase(testCase, false);
  runCase(testCase, true);
}

TEST(PagedAttention, ShortQueryAfterLongContextSplitsKeysAndMerges) {
  Case testCase;
  testCase.numBlocks = 300;
  testCase.sequences = {contiguous(0, 4000, 18), contiguous(251, 700, 1)};
  runCase(testCase, false, 4);
  runCase(testCase, true, 4);
}

TEST(PagedAttention, RopeInKernelRotatesKeysAtTheirLogicalIndex) {
  Case testCase;
  testCase.ropeInKernel = true;
  TestSequence sequence;
  sequence.blockIds = {7, 3, 8};
  sequence.validTokens = {5, 16, 9};
  sequence.numQueries = 9;
  testCase.sequences = {sequence, contiguous(20, 300, 1)};
  runCase(testCase, false, 2);
  runCase(testCase, true, 2);
}

TEST(PagedAttention, RopeInKernelRotatesNeoXPairs) {
  Case testCase;
  testCase.ropeInKernel = true;
  testCase.ropeOrder = RopeOrder::NeoX;
  testCase.numQueryHeads = 4;
  testCase.numKvHeads = 2;
  TestSequence sequence;
  sequence.blockIds = {2, 6, 1};
  sequence.validTokens = {16, 11, 16};
  sequence.numQueries = 20;
  testCase.sequences = {sequence, contiguous(10, 45, 2)};
  runCase(testCase, false, 1);
  runCase(testCase, true, 1);
}

TEST(PagedAttention, SpanScalingSharpensAndWeighsSpanPagesApart) {
  // A tail after a prefix and two spans (APE-style scaling): its span
  // pages score at a temperature and their mass is scaled before it is
  // weighed against the prefix's and its own. Prompt rows and a decode
  // row, padding in a span page, a split run of span pages (minPages 2),
  // an unscaled sequence over the same pages, and sequences whose visible
  // pages hold no span page.
  Case testCase;
  testCase.numBlocks = 40;
  TestSequence tail;
  tail.blockIds = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  tail.validTokens = {16, 5, 16, 16, 16, 9, 16, 16, 7};
  tail.spanPages = {0, 0, 1, 1, 1, 1, 1, 0, 0};
  tail.scaling = {0.7f, 1.3f};
  tail.numQueries = 20;
  TestSequence decode = tail;
  decode.numQueries = 1;
  decode.scaling = {1.0f, 0.8f};
  TestSequence plain = tail;
  plain.spanPages.clear();
  plain.numQueries = 3;
  // Its span page is visible to its later rows only: some tiles are
  // scaled, some not, and a scaled tile's first rows see no span key.
  TestSequence spanOnlyAfter;
  spanOnlyAfter.blockIds = {9, 10, 11};
  spanOnlyAfter.validTokens = {16, 16, 16};
  spanOnlyAfter.spanPages = {0, 0, 1};
  spanOnlyAfter.scaling = {0.5f, 2.0f};
  spanOnlyAfter.numQueries = 30;
  TestSequence temperatureOnly = tail;
  temperatureOnly.scaling = {0.5f, 1.0f};
  temperatureOnly.numQueries = 2;
  testCase.sequences = {tail, decode, plain, spanOnlyAfter, temperatureOnly};
  for (int minPages : {0, 2}) {
    runCase(testCase, false, minPages);
    runCase(testCase, true, minPages);
  }
  testCase.ropeInKernel = true;
  runCase(testCase, false, 2);
}

TEST(PagedAttention, IdentitySpanScalingIsThePlainKernelBitForBit) {
  Case testCase;
  TestSequence scaled = contiguous(0, 150, 17);
  scaled.spanPages.assign(scaled.blockIds.size(), 0);
  scaled.spanPages[2] = scaled.spanPages[3] = 1;
  TestSequence plain = scaled;
  plain.spanPages.clear();
  std::vector<float> withFlags, without;
  Case flagged = testCase, unflagged = testCase;
  flagged.sequences = {scaled};
  unflagged.sequences = {plain};
  runCaseWith(flagged, false, 0, KvPrecision::F16, false, &withFlags);
  runCaseWith(unflagged, false, 0, KvPrecision::F16, false, &without);
  ASSERT_EQ(withFlags.size(), without.size());
  EXPECT_EQ(0, std::memcmp(withFlags.data(), without.data(),
                           withFlags.size() * sizeof(float)));
}

TEST(PagedAttention, ScalarPathTakesOddShapes) {
  Case testCase;
  testCase.numQueryHeads = 4;
  testCase.numKvHeads = 4;
  testCase.headDim = 40;
  testCase.blockSize = 8;
  testCase.sequences = {contiguous(0, 29, 29, 8), contiguous(10, 50, 3, 8)};
  runCase(testCase, false); // no AVX-512 shape: scalar either way
}

TEST(PagedAttention, WideGroupsSpanSeveralTiles) {
  // 32 query heads on one KV head: one token's rows exceed a 16-row tile.
  Case testCase;
  testCase.numQueryHeads = 32;
  testCase.numKvHeads = 1;
  testCase.sequences = {contiguous(0, 33, 3)};
  runCase(testCase, false);
  runCase(testCase, true);
}

} // namespace
