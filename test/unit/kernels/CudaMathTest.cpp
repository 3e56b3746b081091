//===- CudaMathTest.cpp - The CUDA kernels' arithmetic, run on the host ---===//
//
// The per-element functions the CUDA kernels call (SPANC_HOST_DEVICE)
// compiled by the host compiler and compared with the CPU kernels and the
// model loader: half and bf16 conversions, GGUF block dequantization,
// RMSNorm, SwiGLU, RoPE, the argmax tie rule, and the launch shapes. These
// run everywhere, GPU or not.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/Rope.h"
#include "runtime/kernels/cuda/DequantizeMath.h"
#include "runtime/kernels/cuda/ElementwiseMath.h"
#include "runtime/kernels/cuda/HostDevice.h"
#include "runtime/kernels/cuda/Launch.h"
#include "runtime/model/Quantization.h"
#include "runtime/model/Sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace spanc;

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(CudaMath, HalfConversionsMatchTheCpuOnEveryHalf) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float expected = cpu::halfToFloat(uint16_t(bits));
    const float actual = cuda::halfToFloat(uint16_t(bits));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << bits;
      continue;
    }
    ASSERT_EQ(bitsOf(actual), bitsOf(expected)) << "half " << bits;
  }
}

TEST(CudaMath, FloatToHalfAndBf16RoundAsTheCpu) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> anyBits;
  for (int trial = 0; trial < 200000; ++trial) {
    uint32_t bits = anyBits(rng);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    ASSERT_EQ(cuda::floatToHalf(value), cpu::floatToHalf(value)) << bits;
    ASSERT_EQ(cuda::floatToBf16(value), model::floatToBf16(value)) << bits;
  }
  // Ties to even, subnormals, overflow.
  for (float value : {1.0009765625f + 0.00048828125f, 6.1e-5f, 5.96e-8f,
                      65519.0f, 65520.0f, -0.0f, 1e-30f})
    EXPECT_EQ(cuda::floatToHalf(value), cpu::floatToHalf(value)) << value;
}

/// Random bytes for `blocks` blocks of `type`, with the f16 scales set to
/// finite values (random bits would make some of them NaN or inf).
std::vector<uint8_t> randomBlocks(model::GgmlType type, int blocks,
                                  std::mt19937 &rng) {
  const model::GgmlTypeTraits traits = model::ggmlTypeTraits(type);
  std::vector<uint8_t> bytes(size_t(blocks) * traits.blockBytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t &value : bytes)
    value = uint8_t(byte(rng));
  std::normal_distribution<float> scale(0.0f, 0.05f);
  auto setHalf = [&](uint8_t *at) {
    const uint16_t half = cpu::floatToHalf(scale(rng));
    at[0] = uint8_t(half & 0xff);
    at[1] = uint8_t(half >> 8);
  };
  for (int block = 0; block < blocks; ++block) {
    uint8_t *start = bytes.data() + size_t(block) * traits.blockBytes;
    switch (type) {
    case model::GgmlType::Q4_0:
    case model::GgmlType::Q8_0:
      setHalf(start);
      break;
    case model::GgmlType::Q4_1:
    case model::GgmlType::Q4_K:
      setHalf(start);
      setHalf(start + 2);
      break;
    case model::GgmlType::Q6_K:
      setHalf(start + 208);
      break;
    default:
      break;
    }
  }
  return bytes;
}

float deviceElement(model::GgmlType type, const uint8_t *bytes, int64_t index) {
  const model::GgmlTypeTraits traits = model::ggmlTypeTraits(type);
  const uint8_t *block = bytes + index / traits.blockSize * traits.blockBytes;
  const int inBlock = int(index % traits.blockSize);
  switch (type) {
  case model::GgmlType::Q4_0:
    return cuda::dequantizeQ4_0Element(block, inBlock);
  case model::GgmlType::Q4_1:
    return cuda::dequantizeQ4_1Element(block, inBlock);
  case model::GgmlType::Q8_0:
    return cuda::dequantizeQ8_0Element(block, inBlock);
  case model::GgmlType::Q4_K:
    return cuda::dequantizeQ4_KElement(block, inBlock);
  case model::GgmlType::Q6_K:
    return cuda::dequantizeQ6_KElement(block, inBlock);
  default:
    ADD_FAILURE() << "no element function";
    return 0;
  }
}

TEST(CudaMath, DequantizedBlocksEqualTheLoadersBitForBit) {
  std::mt19937 rng(11);
  for (model::GgmlType type :
       {model::GgmlType::Q4_0, model::GgmlType::Q4_1, model::GgmlType::Q8_0,
        model::GgmlType::Q4_K, model::GgmlType::Q6_K}) {
    SCOPED_TRACE(model::ggmlTypeName(type));
    const int blocks = 12;
    const int64_t count =
        int64_t(blocks) * model::ggmlTypeTraits(type).blockSize;
    const std::vector<uint8_t> bytes = randomBlocks(type, blocks, rng);
    std::vector<float> expected(static_cast<size_t>(count));
    model::dequantizeRow(type, bytes.data(), expected.data(), count);
    for (int64_t index = 0; index < count; ++index)
      ASSERT_EQ(bitsOf(deviceElement(type, bytes.data(), index)),
                bitsOf(expected[size_t(index)]))
          << "element " << index << ": " << expected[size_t(index)];
  }
}

TEST(CudaMath, RmsNormOfARowMatchesTheCpuKernel) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 576;
  std::vector<float> x(cols), weight(cols), expected(cols);
  for (float &value : x)
    value = normal(rng);
  for (float &value : weight)
    value = normal(rng);
  cpu::rmsNorm(cpu::RowShape{1, cols, cols, cols}, x.data(), weight.data(),
               1e-5f, expected.data());
  float sum = 0;
  for (float value : x)
    sum += value * value;
  const float scale = cuda::rmsNormScale(sum, cols, 1e-5f);
  for (int64_t col = 0; col < cols; ++col)
    EXPECT_NEAR(
        cuda::rmsNormElement(x[size_t(col)], scale, weight[size_t(col)]),
        expected[size_t(col)],
        1e-5f * (1.0f + std::fabs(expected[size_t(col)])));
}

TEST(CudaMath, SwiGluMatchesTheCpuKernel) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t cols = 1536;
  std::vector<float> gate(cols), up(cols), expected(cols);
  for (int64_t col = 0; col < cols; ++col) {
    gate[size_t(col)] = normal(rng);
    up[size_t(col)] = normal(rng);
  }
  cpu::swiGlu(cpu::RowShape{1, cols, cols, cols}, gate.data(), up.data(),
              expected.data());
  for (int64_t col = 0; col < cols; ++col)
    EXPECT_NEAR(cuda::swiGluElement(gate[size_t(col)], up[size_t(col)]),
                expected[size_t(col)],
                2e-6f * (1.0f + std::fabs(expected[size_t(col)])));
}

TEST(CudaMath, RopePairsRotateAsTheCpuInBothOrders) {
  for (cpu::RopeOrder order : {cpu::RopeOrder::Normal, cpu::RopeOrder::NeoX}) {
    cpu::RopeConfig config;
    config.headDim = 64;
    config.rotaryDim = 48; // the last 16 dims do not turn
    config.order = order;
    config.theta = 100000.0f;
    cpu::RopeTable table(config, 512);
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int32_t position : {0, 1, 17, 511}) {
      std::vector<float> expected(64), actual(64);
      for (float &value : expected)
        value = normal(rng);
      actual = expected;
      cpu::applyRope(cpu::RopeShape{1, 1, 64}, table, &position,
                     expected.data());
      // The kernel's loop body over the pairs of one head.
      const float *cosSin = table.row(position);
      const int half = config.rotaryDim / 2;
      for (int pair = 0; pair < half; ++pair) {
        int first, second;
        cuda::ropePairDims(order == cpu::RopeOrder::NeoX, config.rotaryDim,
                           pair, first, second);
        cuda::rotatePair(actual[size_t(first)], actual[size_t(second)],
                         cosSin[pair], cosSin[half + pair],
                         actual[size_t(first)], actual[size_t(second)]);
      }
      for (int dim = 0; dim < 64; ++dim)
        ASSERT_EQ(actual[size_t(dim)], expected[size_t(dim)])
            << "position " << position << " dim " << dim;
    }
  }
}

TEST(CudaMath, ArgmaxKeepsTheSamplersFirstMaximum) {
  const std::vector<float> logits = {1.0f, 3.0f, NAN, 3.0f, -2.0f, 3.0f};
  float best = NAN;
  int64_t bestIndex = int64_t(logits.size());
  // Any visiting order (the kernel's threads and tree) gives the same.
  for (int64_t index : {5, 3, 0, 2, 1, 4})
    if (cuda::argmaxBetter(logits[size_t(index)], index, best, bestIndex)) {
      best = logits[size_t(index)];
      bestIndex = index;
    }
  EXPECT_EQ(bestIndex, model::Sampler::argmax(logits));
  EXPECT_EQ(bestIndex, 1);
}

TEST(CudaLaunch, ElementwiseLaunchCoversEveryElementWithinTheGridLimit) {
  EXPECT_EQ(cuda::elementwiseLaunch(0).blocks, 0);
  EXPECT_EQ(cuda::elementwiseLaunch(-3).blocks, 0);
  const cuda::LaunchShape one = cuda::elementwiseLaunch(1);
  EXPECT_EQ(one.blocks, 1);
  EXPECT_EQ(one.threads, 256);
  EXPECT_EQ(cuda::elementwiseLaunch(257).blocks, 2);
  // A 128k x 4096 embedding: capped, the kernels stride over the rest.
  const cuda::LaunchShape huge =
      cuda::elementwiseLaunch(int64_t(128256) * 4096);
  EXPECT_EQ(huge.blocks, cuda::kMaxElementwiseBlocks);
  EXPECT_LE(huge.blocks, int64_t(1) << 31);
}

TEST(CudaLaunch, RowLaunchIsOneBlockPerRowOfWholeWarps) {
  EXPECT_EQ(cuda::rowLaunch(0, 576).blocks, 0);
  EXPECT_EQ(cuda::rowLaunch(5, 0).blocks, 0);
  const cuda::LaunchShape narrow = cuda::rowLaunch(7, 5);
  EXPECT_EQ(narrow.blocks, 7);
  EXPECT_EQ(narrow.threads, 32);
  EXPECT_EQ(cuda::rowLaunch(7, 576).threads, 576);
  EXPECT_EQ(cuda::rowLaunch(7, 4096).threads, 1024);
  EXPECT_EQ(cuda::rowLaunch(3, 100).threads % 32, 0);
}

} // namespace
