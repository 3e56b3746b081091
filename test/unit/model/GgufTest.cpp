//===- GgufTest.cpp - GGUF reader: round trips and every error path -------===//
//
// Files here are synthetic: GgufWriter lays them out, and the error tests
// corrupt single fields of the written bytes, so each check of the reader is
// exercised on its own.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Gguf.h"
#include "runtime/model/GgufWriter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "llvm/Support/FileSystem.h"

#include <cstdlib>
#include <cstring>

using namespace spanc::model;
using ::testing::HasSubstr;

namespace {

std::string errorOf(const std::string &bytes) {
  auto file = GgufFile::openBuffer(bytes, "test.gguf");
  if (file)
    return "(no error)";
  return llvm::toString(file.takeError());
}

void put32(std::string &bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

void put64(std::string &bytes, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

/// A file with one metadata string and one 2 x 32 F32 tensor "weights".
GgufWriter smallFile(uint32_t version = 3) {
  GgufWriter writer(version);
  writer.addString("general.architecture", "llama");
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i)
    values[i] = static_cast<float>(i) * 0.5f;
  writer.addTensorF32("weights", {32, 2}, values);
  return writer;
}

/// Offset of the tensor info field that follows the name `name` (with
/// `dims` dimensions): 0 = dimension count, then dims, type, data offset.
size_t tensorInfoAt(const std::string &bytes, const std::string &name) {
  size_t at = bytes.find(name);
  EXPECT_NE(at, std::string::npos);
  return at + name.size();
}

} // namespace

TEST(Gguf, RoundTripsEveryValueTypeAndNestedArrays) {
  GgufWriter writer(3);
  writer.add("u8", GgufWriterValue::u8(200));
  writer.add("i8", GgufWriterValue::i8(-100));
  writer.add("u16", GgufWriterValue::u16(60000));
  writer.add("i16", GgufWriterValue::i16(-30000));
  writer.add("u32", GgufWriterValue::u32(4000000000u));
  writer.add("i32", GgufWriterValue::i32(-2000000000));
  writer.add("u64", GgufWriterValue::u64(1ull << 63));
  writer.add("i64", GgufWriterValue::i64(-(1ll << 62)));
  writer.add("f32", GgufWriterValue::f32(0.25f));
  writer.add("f64", GgufWriterValue::f64(-1e300));
  writer.add("yes", GgufWriterValue::boolean(true));
  writer.add("text", GgufWriterValue::string("héllo 世界"));
  writer.addStringArray("tokens", {"a", "", "ccc"});
  writer.addFloat32Array("scores", {1.0f, -2.5f});
  writer.addInt32Array("types", {1, 3, 6});
  writer.add("nested",
             GgufWriterValue::array(
                 GgufValueType::Array,
                 {GgufWriterValue::array(GgufValueType::UInt16,
                                         {GgufWriterValue::u16(7)}),
                  GgufWriterValue::array(GgufValueType::String, {})}));
  auto file = GgufFile::openBuffer(writer.write(), "all.gguf");
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  const GgufFile &gguf = **file;
  EXPECT_EQ(gguf.version(), 3u);
  EXPECT_EQ(gguf.metadata().size(), 16u);
  EXPECT_EQ(gguf.metadata()[0].key, "u8");
  EXPECT_EQ(*gguf.getUnsigned("u8"), 200u);
  EXPECT_EQ(*gguf.getSigned("i8"), -100);
  EXPECT_EQ(*gguf.getUnsigned("u16"), 60000u);
  EXPECT_EQ(*gguf.getSigned("i16"), -30000);
  EXPECT_EQ(*gguf.getUnsigned("u32"), 4000000000u);
  EXPECT_EQ(*gguf.getSigned("i32"), -2000000000);
  EXPECT_EQ(*gguf.getUnsigned("u64"), 1ull << 63);
  EXPECT_EQ(*gguf.getSigned("i64"), -(1ll << 62));
  EXPECT_EQ(*gguf.getFloat("f32"), 0.25);
  EXPECT_EQ(*gguf.getFloat("f64"), -1e300);
  EXPECT_TRUE(*gguf.getBool("yes"));
  EXPECT_EQ(*gguf.getString("text"), "héllo 世界");
  EXPECT_EQ(*gguf.getStringArray("tokens"),
            std::vector<llvm::StringRef>({"a", "", "ccc"}));
  EXPECT_EQ(*gguf.getFloatArray("scores"), std::vector<float>({1.0f, -2.5f}));
  EXPECT_EQ(*gguf.getIntArray("types"), std::vector<int64_t>({1, 3, 6}));
  const GgufValue *nested = gguf.find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arraySize(), 2u);
  EXPECT_EQ(nested->elementType(), GgufValueType::Array);
  EXPECT_EQ(nested->element(0).elementType(), GgufValueType::UInt16);
  EXPECT_EQ(*nested->element(0).element(0).asUnsigned(), 7u);
  EXPECT_EQ(nested->element(1).arraySize(), 0u);
  EXPECT_EQ(nested->element(1).elementType(), GgufValueType::String);
}

TEST(Gguf, TypedGettersNameTheKey) {
  auto file = GgufFile::openBuffer(smallFile().write(), "t.gguf");
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString((*file)->getUnsigned("nope").takeError()),
            "t.gguf: missing metadata key 'nope'");
  EXPECT_EQ(*(*file)->getUnsigned("nope", 7), 7u);
  EXPECT_EQ(
      llvm::toString((*file)->getUnsigned("general.architecture").takeError()),
      "t.gguf: metadata key 'general.architecture' is string, expected an "
      "unsigned integer");
  EXPECT_EQ(llvm::toString(
                (*file)->getStringArray("general.architecture").takeError()),
            "t.gguf: metadata key 'general.architecture' is string, expected "
            "an array of strings");
  EXPECT_EQ(llvm::toString((*file)->getTensor("missing").takeError()),
            "t.gguf: missing tensor 'missing'");
}

TEST(Gguf, ReadsTensorsInVersion2And3) {
  for (uint32_t version : {2u, 3u}) {
    std::string bytes = smallFile(version).write();
    auto file = GgufFile::openBuffer(bytes, "t.gguf");
    ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
    EXPECT_EQ((*file)->version(), version);
    ASSERT_EQ((*file)->tensors().size(), 1u);
    const GgufTensor *tensor = (*file)->findTensor("weights");
    ASSERT_NE(tensor, nullptr);
    EXPECT_EQ(tensor->type, GgmlType::F32);
    EXPECT_EQ(tensor->shape, (llvm::SmallVector<uint64_t, 4>{32, 2}));
    EXPECT_EQ(tensor->numBytes, 256u);
    EXPECT_EQ(tensor->numRows(), 2u);
    EXPECT_EQ(tensor->rowBytes(), 128u);
    EXPECT_EQ((*file)->dataOffset() % 32, 0u);
    float value;
    std::memcpy(&value, tensor->data + 4 * 33, 4);
    EXPECT_EQ(value, 16.5f);
  }
}

TEST(Gguf, HonoursGeneralAlignment) {
  GgufWriter writer;
  writer.addUInt32("general.alignment", 256);
  writer.addTensorF32("a", {1}, {1.0f});
  writer.addTensorF32("b", {1}, {2.0f});
  auto file = GgufFile::openBuffer(writer.write(), "t.gguf");
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ((*file)->alignment(), 256u);
  EXPECT_EQ((*file)->dataOffset() % 256, 0u);
  EXPECT_EQ((*file)->findTensor("b")->offset, 256u);
  float value;
  std::memcpy(&value, (*file)->findTensor("b")->data, 4);
  EXPECT_EQ(value, 2.0f);

  GgufWriter bad;
  bad.addUInt32("general.alignment", 48);
  EXPECT_EQ(errorOf(bad.write()),
            "test.gguf: key 'general.alignment' is 48, not a power of two up "
            "to 2^30");
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  std::string bytes = smallFile().write();
  // Any prefix that cuts the header, metadata, tensor infos or data fails.
  for (size_t length = 0; length < bytes.size(); ++length) {
    std::string error = errorOf(bytes.substr(0, length));
    EXPECT_NE(error, "(no error)") << length;
  }
  EXPECT_EQ(errorOf(bytes.substr(0, 2)),
            "test.gguf: truncated file: 2 bytes is too small for a GGUF "
            "header");
  EXPECT_EQ(errorOf(bytes.substr(0, 30)),
            "test.gguf: metadata entry count 1 is more than the 6 remaining "
            "bytes can hold");
  size_t offsetField = tensorInfoAt(bytes, "weights") + 4 + 16 + 4;
  EXPECT_EQ(errorOf(bytes.substr(0, offsetField + 4)),
            "test.gguf: truncated file: the data offset of tensor 'weights' "
            "at offset " +
                std::to_string(offsetField) +
                " needs 8 bytes but only 4 remain");
}

TEST(Gguf, RejectsBadMagic) {
  std::string bytes = smallFile().write();
  bytes[0] = 'L';
  EXPECT_EQ(errorOf(bytes), "test.gguf: bad magic 0x4655474c (not a GGUF "
                            "file: expected \"GGUF\")");
}

TEST(Gguf, RejectsBadVersions) {
  std::string bytes = smallFile().write();
  put32(bytes, 4, 1);
  EXPECT_EQ(errorOf(bytes), "test.gguf: GGUF version 1 is not supported "
                            "(only versions 2 and 3)");
  put32(bytes, 4, 4);
  EXPECT_EQ(errorOf(bytes),
            "test.gguf: unsupported GGUF version 4 (only versions 2 and 3)");
  put32(bytes, 4, 3u << 24);
  EXPECT_THAT(errorOf(bytes), HasSubstr("big-endian GGUF is not supported"));
}

TEST(Gguf, RejectsOverlongString) {
  std::string bytes = smallFile().write();
  // The value length of general.architecture follows key and type tag.
  size_t at = bytes.find("general.architecture") + 20 + 4;
  put64(bytes, at, 1ull << 40);
  EXPECT_THAT(errorOf(bytes),
              HasSubstr("string of length 1099511627776 (the value of key "
                        "'general.architecture') at offset 64 runs past the "
                        "end of the file"));
}

TEST(Gguf, RejectsHugeArrayBeforeAllocating) {
  GgufWriter writer;
  writer.addStringArray("tokenizer.ggml.tokens", {"a", "b"});
  std::string bytes = writer.write();
  size_t at = bytes.find("tokenizer.ggml.tokens") + 21 + 4 + 4;
  put64(bytes, at, ~0ull);
  EXPECT_THAT(errorOf(bytes),
              HasSubstr("array key 'tokenizer.ggml.tokens' declares "
                        "18446744073709551615 string elements"));
}

TEST(Gguf, RejectsTensorDataPastTheEnd) {
  std::string bytes = smallFile().write();
  EXPECT_EQ(errorOf(bytes.substr(0, bytes.size() - 4)),
            "test.gguf: tensor 'weights' data (offset 0, 256 bytes) runs past "
            "the end of the file (the data section holds 252 bytes)");
  // A huge offset must not wrap around.
  put64(bytes, tensorInfoAt(bytes, "weights") + 4 + 16 + 4, ~0ull << 5);
  EXPECT_THAT(errorOf(bytes), HasSubstr("runs past the end of the file"));
}

TEST(Gguf, RejectsMisalignedOffset) {
  std::string bytes = smallFile().write();
  put64(bytes, tensorInfoAt(bytes, "weights") + 4 + 16 + 4, 8);
  EXPECT_EQ(errorOf(bytes), "test.gguf: tensor 'weights' has data offset 8, "
                            "not a multiple of the alignment 32");
}

/// Two matrices: Q4_1 "first" (64 x 2: 4 blocks, 80 bytes, padded to 96)
/// and F32 "second" (32 x 2, 256 bytes) after it; then two 32-float
/// vectors "norm_a" and "norm_b".
GgufWriter twoMatrices() {
  GgufWriter writer;
  std::string blocks(80, '\0');
  writer.addTensor("first", GgmlType::Q4_1, {64, 2}, blocks);
  writer.addTensorF32("second", {32, 2}, std::vector<float>(64, 1.0f));
  writer.addTensorF32("norm_a", {32}, std::vector<float>(32, 1.0f));
  writer.addTensorF32("norm_b", {32}, std::vector<float>(32, 1.0f));
  return writer;
}

TEST(Gguf, TheTwoMatricesFileOpens) {
  EXPECT_EQ(errorOf(twoMatrices().write()), "(no error)");
}

TEST(Gguf, RejectsATensorRelabelledToALargerType) {
  // Issue 25: a Q4_1 matrix relabelled F32 reads 512 bytes where its 80
  // are, the next tensor's among them; it loaded.
  std::string bytes = twoMatrices().write();
  put32(bytes, tensorInfoAt(bytes, "first") + 4 + 16,
        static_cast<uint32_t>(GgmlType::F32));
  EXPECT_EQ(errorOf(bytes),
            "test.gguf: tensor 'first' (F32 [64, 2], 512 bytes at offset 0) "
            "overlaps tensor 'second' at offset 96: its type or shape does "
            "not match its data");
}

TEST(Gguf, RejectsAShapeThatGrewIntoTheNextTensor) {
  std::string bytes = twoMatrices().write();
  put64(bytes, tensorInfoAt(bytes, "second") + 4 + 8, 3); // [32, 3]
  EXPECT_EQ(errorOf(bytes),
            "test.gguf: tensor 'second' (F32 [32, 3], 384 bytes at offset 96) "
            "overlaps tensor 'norm_a' at offset 352: its type or shape does "
            "not match its data");
}

TEST(Gguf, RejectsTwoTensorsAtOneOffset) {
  // Issue 25: blk.0.ffn_norm.weight moved onto blk.0.attn_norm.weight's
  // bytes loaded, and ran with one norm twice.
  std::string bytes = twoMatrices().write();
  size_t offsetOfA = tensorInfoAt(bytes, "norm_a") + 4 + 8 + 4;
  size_t offsetOfB = tensorInfoAt(bytes, "norm_b") + 4 + 8 + 4;
  uint64_t offset = 0;
  std::memcpy(&offset, bytes.data() + offsetOfA, 8);
  put64(bytes, offsetOfB, offset);
  EXPECT_EQ(errorOf(bytes), "test.gguf: tensors 'norm_a' and 'norm_b' have "
                            "the same data offset 352: each tensor needs "
                            "bytes of its own");
}

TEST(Gguf, EmptyTensorsMayShareAnOffset) {
  GgufWriter writer;
  writer.addTensorF32("empty_a", {0}, {});
  writer.addTensorF32("empty_b", {0}, {});
  writer.addTensorF32("full", {32}, std::vector<float>(32, 1.0f));
  EXPECT_EQ(errorOf(writer.write()), "(no error)");
}

TEST(Gguf, RejectsTooManyDimensions) {
  std::string bytes = smallFile().write();
  put32(bytes, tensorInfoAt(bytes, "weights"), 5);
  EXPECT_EQ(errorOf(bytes),
            "test.gguf: tensor 'weights' has 5 dimensions (at most 4)");
}

TEST(Gguf, RejectsUnknownTensorTypeAndPartialBlocks) {
  std::string bytes = smallFile().write();
  size_t typeAt = tensorInfoAt(bytes, "weights") + 4 + 16;
  put32(bytes, typeAt, 4);
  EXPECT_EQ(errorOf(bytes),
            "test.gguf: tensor 'weights' has unknown ggml type 4");
  put32(bytes, typeAt, static_cast<uint32_t>(GgmlType::Q4_K));
  EXPECT_EQ(errorOf(bytes), "test.gguf: tensor 'weights': row length 32 is "
                            "not a multiple of the Q4_K block size 256");
}

TEST(Gguf, RejectsOverflowingShape) {
  std::string bytes = smallFile().write();
  size_t dimsAt = tensorInfoAt(bytes, "weights") + 4;
  put64(bytes, dimsAt, 1ull << 32);
  put64(bytes, dimsAt + 8, 1ull << 32);
  EXPECT_EQ(errorOf(bytes), "test.gguf: tensor 'weights': the element count "
                            "overflows at dimension 1 (extent 4294967296)");
}

TEST(Gguf, RejectsDuplicatesAndUnknownValueTypes) {
  GgufWriter writer;
  writer.addUInt32("a", 1);
  writer.addUInt32("a", 2);
  EXPECT_EQ(errorOf(writer.write()), "test.gguf: duplicate metadata key 'a'");

  GgufWriter tensors;
  tensors.addTensorF32("t", {1}, {1.0f});
  tensors.addTensorF32("t", {1}, {1.0f});
  EXPECT_EQ(errorOf(tensors.write()), "test.gguf: duplicate tensor 't'");

  GgufWriter typed;
  typed.addUInt32("key", 1);
  std::string bytes = typed.write();
  put32(bytes, bytes.find("key") + 3, 13);
  EXPECT_EQ(errorOf(bytes), "test.gguf: key 'key' has unknown value type 13");
}

TEST(Gguf, BoundsArrayNesting) {
  GgufWriterValue value = GgufWriterValue::array(GgufValueType::UInt8, {});
  for (int depth = 0; depth < 20; ++depth)
    value = GgufWriterValue::array(GgufValueType::Array, {value});
  GgufWriter writer;
  writer.add("deep", value);
  EXPECT_THAT(errorOf(writer.write()),
              HasSubstr("arrays nested deeper than 16 levels"));
}

TEST(Gguf, OpensTheRealModel) {
  const char *root = std::getenv("SPANC_ROOT");
  std::string path = std::string(root ? root : ".") +
                     "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!llvm::sys::fs::exists(path))
    GTEST_SKIP() << "model not installed (tools/setup.sh): " << path;
  auto file = GgufFile::open(path);
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ(*(*file)->getString("general.architecture"), "llama");
  EXPECT_EQ((*file)->getStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  // 30 layers x 9 tensors + token embedding + final norm.
  EXPECT_EQ((*file)->tensors().size(), 272u);
  const GgufTensor *embedding = (*file)->findTensor("token_embd.weight");
  ASSERT_NE(embedding, nullptr);
  EXPECT_EQ(embedding->shape, (llvm::SmallVector<uint64_t, 4>{576, 49152}));
}

TEST(Gguf, OpenNamesMissingFile) {
  auto file = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(static_cast<bool>(file));
  EXPECT_EQ(llvm::toString(file.takeError()),
            "/nonexistent/model.gguf: cannot open: No such file or directory");
}
