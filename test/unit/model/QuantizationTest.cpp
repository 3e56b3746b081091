//===- QuantizationTest.cpp - Dequantization against hand-computed blocks -===//
//
// Each block below is built byte by byte from the documented ggml layout and
// the expected values are worked out by hand in the comments, so a layout
// mistake (nibble order, scale packing, offsets) fails here.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Quantization.h"

#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <vector>

using namespace spanc::model;

namespace {

void put16(std::vector<uint8_t> &bytes, size_t at, uint16_t value) {
  bytes[at] = value & 0xff;
  bytes[at + 1] = value >> 8;
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t> &src,
                              int64_t count) {
  EXPECT_FALSE(static_cast<bool>(checkDequantizable(type, count)));
  std::vector<float> out(count, std::nanf(""));
  dequantizeRow(type, src.data(), out.data(), count);
  return out;
}

} // namespace

TEST(Quantization, TypeGeometryMatchesGgml) {
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q4_0).blockBytes, 18u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q4_1).blockBytes, 20u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q8_0).blockBytes, 34u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q4_K).blockBytes, 144u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q6_K).blockBytes, 210u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::Q6_K).blockSize, 256u);
  EXPECT_EQ(ggmlTypeTraits(GgmlType::BF16).blockBytes, 2u);
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::BF16), 30u);
  EXPECT_FALSE(isKnownGgmlType(4)); // retired Q4_2
  EXPECT_EQ(ggmlTypeName(static_cast<GgmlType>(99)), "type#99");
  EXPECT_EQ(ggmlRowBytes(GgmlType::Q4_K, 512), 288u);
}

TEST(Quantization, RejectsUnsupportedTypeAndPartialBlocks) {
  llvm::Error error = checkDequantizable(GgmlType::Q5_K, 256);
  EXPECT_EQ(llvm::toString(std::move(error)),
            "tensor type Q5_K cannot be dequantized (supported: F32, F16, "
            "BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
  error = checkDequantizable(GgmlType::Q4_0, 33);
  EXPECT_EQ(llvm::toString(std::move(error)),
            "a row of 33 elements is not a whole number of Q4_0 blocks of 32");
}

TEST(Quantization, HalfConversionIsExact) {
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(halfToFloat(0xfc00)) && halfToFloat(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  // Every non-NaN half survives a round trip.
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff))
      continue;
    ASSERT_EQ(floatToHalf(halfToFloat(bits)), bits) << bits;
  }
  // Rounding: ties to even, overflow to infinity, underflow to zero.
  EXPECT_EQ(floatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00); // tie, even
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Quantization, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.00390625f), 0x3f80); // halfway, stays even
  EXPECT_EQ(floatToBf16(1.01171875f), 0x3f82); // halfway, rounds up to even
  EXPECT_EQ(floatToBf16(1.005f), 0x3f81);
  EXPECT_EQ(bf16ToFloat(0xc0a0), -5.0f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
}

TEST(Quantization, F32F16Bf16Rows) {
  std::vector<uint8_t> f32(8);
  float values[2] = {1.5f, -0.25f};
  std::memcpy(f32.data(), values, 8);
  EXPECT_EQ(dequantize(GgmlType::F32, f32, 2),
            std::vector<float>({1.5f, -0.25f}));

  std::vector<uint8_t> f16(6);
  put16(f16, 0, 0x3c00);
  put16(f16, 2, 0xc000);
  put16(f16, 4, 0x3555);
  EXPECT_EQ(dequantize(GgmlType::F16, f16, 3),
            std::vector<float>({1.0f, -2.0f, 0.333251953125f}));

  std::vector<uint8_t> bf16(4);
  put16(bf16, 0, 0x3f80);
  put16(bf16, 2, 0xc0a0);
  EXPECT_EQ(dequantize(GgmlType::BF16, bf16, 2),
            std::vector<float>({1.0f, -5.0f}));
}

TEST(Quantization, Q8_0Block) {
  // d = 0.5 (f16 0x3800); x = q * d.
  std::vector<uint8_t> block(34, 0);
  put16(block, 0, 0x3800);
  int8_t quants[5] = {-128, -1, 0, 1, 127};
  std::memcpy(&block[2], quants, 5);
  std::vector<float> out = dequantize(GgmlType::Q8_0, block, 32);
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.5f);
  EXPECT_EQ(out[4], 63.5f);
  EXPECT_EQ(out[31], 0.0f);
}

TEST(Quantization, Q4_0Block) {
  // d = 2; byte j holds element j (low nibble) and j + 16 (high nibble),
  // both minus 8.
  std::vector<uint8_t> block(18, 0x88); // all nibbles 8 -> 0
  put16(block, 0, 0x4000);
  block[2] = 0x0f;  // element 0: (15 - 8) * 2 = 14; element 16: (0 - 8) * 2
  block[3] = 0x83;  // element 1: (3 - 8) * 2 = -10; element 17: 0
  block[17] = 0xf1; // element 15: (1 - 8) * 2 = -14; element 31: 14
  std::vector<float> out = dequantize(GgmlType::Q4_0, block, 32);
  EXPECT_EQ(out[0], 14.0f);
  EXPECT_EQ(out[16], -16.0f);
  EXPECT_EQ(out[1], -10.0f);
  EXPECT_EQ(out[17], 0.0f);
  EXPECT_EQ(out[15], -14.0f);
  EXPECT_EQ(out[31], 14.0f);
  EXPECT_EQ(out[5], 0.0f);
}

TEST(Quantization, Q4_1Block) {
  // d = 0.5, m = -1: x = q * 0.5 - 1.
  std::vector<uint8_t> block(20, 0);
  put16(block, 0, 0x3800);
  put16(block, 2, 0xbc00);
  block[4] = 0xf0;  // element 0: 0 -> -1; element 16: 15 -> 6.5
  block[19] = 0x37; // element 15: 7 -> 2.5; element 31: 3 -> 0.5
  std::vector<float> out = dequantize(GgmlType::Q4_1, block, 32);
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[16], 6.5f);
  EXPECT_EQ(out[15], 2.5f);
  EXPECT_EQ(out[31], 0.5f);
  EXPECT_EQ(out[7], -1.0f);
}

TEST(Quantization, Q4_KBlock) {
  // d = 1, dmin = 0.5. The 12 scale bytes pack eight 6-bit (scale, min)
  // pairs: sub-blocks 0..3 in the low 6 bits of bytes 0..3 (scales) and
  // 4..7 (mins); sub-blocks 4..7 in the nibbles of bytes 8..11 plus the top
  // two bits of bytes 0..3 (scales) and 4..7 (mins).
  std::vector<uint8_t> block(144, 0);
  put16(block, 0, 0x3c00);
  put16(block, 2, 0x3800);
  uint8_t *packed = &block[4];
  packed[0] = 0x45; // scale0 = 5; top bits 01 -> scale4 high part 1
  packed[4] = 0x83; // min0 = 3; top bits 10 -> min4 high part 2
  packed[1] = 0x02; // scale1 = 2
  packed[5] = 0x04; // min1 = 4
  packed[8] = 0x72; // scale4 = 2 | 1 << 4 = 18; min4 = 7 | 2 << 4 = 39
  uint8_t *quants = &block[16];
  quants[0] = 0xa9;  // element 0: 9 (sub-block 0); element 32: 10 (sub 1)
  quants[64] = 0x0c; // element 128: 12 (sub-block 4)
  std::vector<float> out = dequantize(GgmlType::Q4_K, block, 256);
  EXPECT_EQ(out[0], 1.0f * 5 * 9 - 0.5f * 3);      // 43.5
  EXPECT_EQ(out[1], 1.0f * 5 * 0 - 0.5f * 3);      // -1.5
  EXPECT_EQ(out[32], 1.0f * 2 * 10 - 0.5f * 4);    // 18
  EXPECT_EQ(out[128], 1.0f * 18 * 12 - 0.5f * 39); // 196.5
  EXPECT_EQ(out[129], -0.5f * 39);
  EXPECT_EQ(out[255], 0.0f); // sub-block 7: scale 0, min 0
}

TEST(Quantization, Q6_KBlock) {
  // 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, d. Within a
  // 128-element half: element l uses ql[l] low + qh[l] bits 0-1, l + 32
  // uses ql[l + 32] low + bits 2-3, l + 64 uses ql[l] high + bits 4-5,
  // l + 96 uses ql[l + 32] high + bits 6-7; values are q - 32.
  std::vector<uint8_t> block(210, 0);
  uint8_t *low = &block[0];
  uint8_t *high = &block[128];
  int8_t *scales = reinterpret_cast<int8_t *>(&block[192]);
  put16(block, 208, 0x3c00); // d = 1
  low[0] = 0x5a;
  low[32] = 0x31;
  high[0] = 0xd9; // bits: 01, 10, 01, 11
  scales[0] = 2;
  scales[1] = 1;
  scales[2] = -1;
  scales[4] = 3;
  scales[6] = 1;
  low[64] = 0x0f; // second half, element 128
  high[32] = 0x03;
  scales[8] = -4;
  std::vector<float> out = dequantize(GgmlType::Q6_K, block, 256);
  EXPECT_EQ(out[0], 2.0f * ((10 | 1 << 4) - 32));    // -12
  EXPECT_EQ(out[32], -1.0f * ((1 | 2 << 4) - 32));   // -1
  EXPECT_EQ(out[64], 3.0f * ((5 | 1 << 4) - 32));    // -33
  EXPECT_EQ(out[96], 1.0f * ((3 | 3 << 4) - 32));    // 19
  EXPECT_EQ(out[16], 1.0f * -32);                    // scales[1], q = 0
  EXPECT_EQ(out[128], -4.0f * ((15 | 3 << 4) - 32)); // -124
  EXPECT_EQ(out[200], 0.0f);
}

TEST(Quantization, MatchesGgufPyOnPseudoRandomBlocks) {
  // test/data/reference/dequant_reference.json: random blocks of each type
  // and the values llama.cpp's gguf-py dequantizes them to (README.md).
  auto buffer =
      llvm::MemoryBuffer::getFile("test/data/reference/dequant_reference.json");
  ASSERT_TRUE(static_cast<bool>(buffer));
  nlohmann::json reference =
      nlohmann::json::parse((*buffer)->getBuffer().str());
  ASSERT_EQ(reference["cases"].size(), 7u);
  for (const nlohmann::json &item : reference["cases"]) {
    auto type = static_cast<GgmlType>(item["type_id"].get<uint32_t>());
    std::string hex = item["bytes"];
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] =
          static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    int64_t count = item["elements"];
    ASSERT_EQ(ggmlRowBytes(type, count), bytes.size()) << item["type"];
    std::vector<float> expected = item["values"];
    std::vector<float> actual = dequantize(type, bytes, count);
    for (int64_t i = 0; i < count; ++i)
      // gguf-py may associate the scale products differently: allow a few
      // ulps, nothing more.
      ASSERT_NEAR(actual[i], expected[i],
                  4e-7f * std::max(1.0f, std::fabs(expected[i])))
          << item["type"] << " element " << i;
  }
}

TEST(Quantization, Bf16RowMatchesRoundedF32Row) {
  // Two Q8_0 blocks with values that are not all representable in bf16.
  std::vector<uint8_t> blocks(68);
  put16(blocks, 0, 0x2e66); // d ~ 0.1
  put16(blocks, 34, 0x3c00);
  for (int i = 0; i < 32; ++i) {
    blocks[2 + i] = static_cast<uint8_t>(i * 7 - 100);
    blocks[36 + i] = static_cast<uint8_t>(127 - i * 3);
  }
  std::vector<float> f32 = dequantize(GgmlType::Q8_0, blocks, 64);
  std::vector<uint16_t> bf16(64);
  convertRowToBf16(GgmlType::Q8_0, blocks.data(), bf16.data(), 64);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(bf16[i], floatToBf16(f32[i])) << i;
}
