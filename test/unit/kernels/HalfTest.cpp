//===- HalfTest.cpp - f16 K/V element conversions agree on every path -----===//
//
// The portable conversions (scalar reference paths) and the AVX-512 ones
// (F16C) must store and read the same bits, or a block written by one path
// and read by another would differ: every half is checked exhaustively, and
// floats around every rounding boundary, subnormals and overflow.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/QuantGemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

using namespace spanc::cpu;

SPANC_AVX512 void convertWithAvx512(const std::vector<float> &in,
                                    std::vector<uint16_t> &out) {
  out.resize(in.size());
  for (size_t index = 0; index + 16 <= in.size(); index += 16)
    store16(out.data() + index, load16(in.data() + index));
}

SPANC_AVX512 void widenWithAvx512(const std::vector<uint16_t> &in,
                                  std::vector<float> &out) {
  out.resize(in.size());
  for (size_t index = 0; index + 16 <= in.size(); index += 16)
    store16(out.data() + index, load16(in.data() + index));
}

bool isNan(uint16_t half) {
  return (half & 0x7c00u) == 0x7c00u && (half & 0x3ffu) != 0;
}

TEST(Half, EveryHalfWidensExactlyAndRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    uint16_t half = uint16_t(bits);
    float value = halfToFloat(half);
    if (isNan(half)) {
      EXPECT_TRUE(std::isnan(value)) << bits;
      continue;
    }
    ASSERT_EQ(floatToHalf(value), half) << "half bits " << bits;
  }
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
}

TEST(Half, RoundsLikeTheModelsF16Rounding) {
  // roundToHalf is what the forward pass applied to K/V before the storage
  // held halves: storing must give exactly those values.
  std::mt19937 random(11);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  for (int index = 0; index < 200000; ++index) {
    float value = index % 2 ? uniform(random)
                            : std::ldexp(uniform(random), -20 + index % 40);
    ASSERT_EQ(halfToFloat(floatToHalf(value)), roundToHalf(value)) << value;
  }
  for (float value : {70000.0f, -65520.0f, 65519.0f, 1e-8f, 2.98e-8f,
                      1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -0.0f})
    EXPECT_EQ(halfToFloat(floatToHalf(value)), roundToHalf(value)) << value;
}

TEST(Half, VectorConversionsStoreTheSameBits) {
  if (!cpuFeatures().hasAvx512())
    GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<uint16_t> every(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits)
    every[bits] = uint16_t(bits);
  std::vector<float> widened;
  widenWithAvx512(every, widened);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    if (isNan(uint16_t(bits)))
      continue;
    ASSERT_EQ(widened[bits], halfToFloat(uint16_t(bits))) << bits;
  }
  // Floats on and next to every halfway point between two halves, and
  // random ones over the whole range.
  std::vector<float> floats;
  for (uint32_t bits = 0; bits < 0x7bff; bits += 7) {
    float low = halfToFloat(uint16_t(bits));
    float high = halfToFloat(uint16_t(bits + 1));
    float middle = low + (high - low) / 2;
    for (float value :
         {middle, std::nextafter(middle, 0.0f), std::nextafter(middle, 1e9f)}) {
      floats.push_back(value);
      floats.push_back(-value);
    }
  }
  std::mt19937 random(5);
  std::uniform_int_distribution<uint32_t> anyBits(0, 0x7f7fffffu);
  for (int index = 0; index < 100000; ++index) {
    uint32_t bits = anyBits(random);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    floats.push_back(value);
  }
  floats.resize(floats.size() / 16 * 16);
  std::vector<uint16_t> converted;
  convertWithAvx512(floats, converted);
  for (size_t index = 0; index < floats.size(); ++index)
    ASSERT_EQ(converted[index], floatToHalf(floats[index])) << floats[index];
}

} // namespace
