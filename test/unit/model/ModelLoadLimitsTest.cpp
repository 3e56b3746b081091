//===- ModelLoadLimitsTest.cpp - Model::load range-checks declared sizes --===//
//
// A GGUF's metadata declares the decoder's sizes; Model::load must refuse
// every one that the file's tensors or the kernels do not support, naming
// the key, before it allocates anything from it. Each case writes a small
// complete decoder (2 layers, embedding 64, 4 heads / 2 KV heads of 16,
// FFN 128, 10 tokens) with one key changed.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/GgufWriter.h"
#include "runtime/model/Model.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <variant>

using namespace spanc::model;
using ::testing::HasSubstr;

namespace {

using MetadataValue = std::variant<uint32_t, float>;

/// One weight of a tensor replaced: its name, the element's index, the
/// value.
struct Poison {
  std::string tensor;
  size_t index = 0;
  float value = 0.0f;
};

/// A complete llama decoder; `changed` replaces the value of a key (without
/// the "llama." prefix), `poison` one weight.
std::string writeDecoder(const std::map<std::string, MetadataValue> &changed,
                         const std::string &name,
                         const std::optional<Poison> &poison = {}) {
  const uint64_t dim = 64, heads = 4, kvHeads = 2, headDim = 16, ffn = 128,
                 vocab = 10, layers = 2;
  std::map<std::string, MetadataValue> metadata = {
      {"block_count", uint32_t(layers)},
      {"embedding_length", uint32_t(dim)},
      {"feed_forward_length", uint32_t(ffn)},
      {"attention.head_count", uint32_t(heads)},
      {"attention.head_count_kv", uint32_t(kvHeads)},
      {"context_length", uint32_t(256)},
      {"attention.layer_norm_rms_epsilon", 1e-5f},
      {"rope.freq_base", 10000.0f},
  };
  for (const auto &[key, value] : changed)
    metadata[key] = value;
  GgufWriter writer;
  writer.addString("general.architecture", "llama");
  for (const auto &[key, value] : metadata) {
    if (const uint32_t *count = std::get_if<uint32_t>(&value))
      writer.addUInt32("llama." + key, *count);
    else
      writer.addFloat32("llama." + key, std::get<float>(value));
  }
  auto tensor = [&](const std::string &tensorName, uint64_t columns,
                    uint64_t rows) {
    std::vector<float> values(size_t(columns * rows), 0.01f);
    if (poison && poison->tensor == tensorName)
      values.at(poison->index) = poison->value;
    if (rows == 1)
      writer.addTensorF32(tensorName, {columns}, values);
    else
      writer.addTensorF32(tensorName, {columns, rows}, values);
  };
  tensor("token_embd.weight", dim, vocab);
  for (uint64_t layer = 0; layer < layers; ++layer) {
    std::string prefix = "blk." + std::to_string(layer) + ".";
    tensor(prefix + "attn_norm.weight", dim, 1);
    tensor(prefix + "ffn_norm.weight", dim, 1);
    tensor(prefix + "attn_q.weight", dim, heads * headDim);
    tensor(prefix + "attn_k.weight", dim, kvHeads * headDim);
    tensor(prefix + "attn_v.weight", dim, kvHeads * headDim);
    tensor(prefix + "attn_output.weight", heads * headDim, dim);
    tensor(prefix + "ffn_gate.weight", dim, ffn);
    tensor(prefix + "ffn_up.weight", dim, ffn);
    tensor(prefix + "ffn_down.weight", ffn, dim);
  }
  tensor("output_norm.weight", dim, 1);
  const char *directory = std::getenv("TEST_TMPDIR");
  llvm::SmallString<256> path(directory ? directory : "/tmp");
  llvm::sys::path::append(path, name + ".gguf");
  llvm::Error error = writer.writeToFile(path);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
  return std::string(path);
}

/// Model::load's error for the decoder with `changed` and `poison`, or ""
/// if it loads.
std::string loadError(const std::map<std::string, MetadataValue> &changed,
                      const std::optional<Poison> &poison = {},
                      const ModelOptions &options = {}) {
  static int files = 0;
  std::string path =
      writeDecoder(changed, "m" + std::to_string(files++), poison);
  auto model = Model::load(path, options);
  if (model)
    return "";
  return llvm::toString(model.takeError());
}

TEST(ModelLoadLimits, TheUnchangedDecoderLoads) {
  EXPECT_EQ(loadError({}), "");
}

TEST(ModelLoadLimits, SizesTheTensorsContradictAreErrorsNamingTheKey) {
  // feed_forward_length = 2^32 - 1 asked for terabytes (std::bad_alloc).
  EXPECT_THAT(loadError({{"feed_forward_length", 0xFFFFFFFFu}}),
              HasSubstr("llama.feed_forward_length (4294967295) and "
                        "llama.embedding_length (64) do not match tensor "
                        "'blk.0.ffn_gate.weight' of shape [64, 128]"));
  EXPECT_THAT(loadError({{"feed_forward_length", 256u}}),
              HasSubstr("llama.feed_forward_length (256)"));
  EXPECT_THAT(loadError({{"attention.head_count_kv", 1u}}),
              HasSubstr("llama.attention.head_count_kv x key_length "
                        "(embedding_length / head_count) (1 x 16) and "
                        "llama.embedding_length (64) do not match tensor "
                        "'blk.0.attn_k.weight' of shape [64, 32]"));
  // The head dimension follows head_count when key_length is not given.
  EXPECT_THAT(loadError({{"attention.head_count", 2u}}),
              HasSubstr("llama.attention.head_count_kv x key_length "
                        "(embedding_length / head_count) (2 x 32)"));
  EXPECT_THAT(loadError({{"attention.key_length", 8u}}),
              HasSubstr("llama.attention.head_count x key_length (4 x 8)"));
}

TEST(ModelLoadLimits, ABlockCountOtherThanTheFileHoldsIsAnError) {
  // One layer fewer ran the model on it and answered, wrongly.
  EXPECT_THAT(loadError({{"block_count", 1u}}),
              HasSubstr("llama.block_count is 1, but the file holds 2 layers "
                        "(tensors blk.0 to blk.1)"));
  EXPECT_THAT(loadError({{"block_count", 0xFFFFFFFFu}}),
              HasSubstr("llama.block_count is 4294967295, but the file holds "
                        "2 layers"));
  EXPECT_THAT(loadError({{"block_count", 0u}}), HasSubstr("block_count"));
}

TEST(ModelLoadLimits, SizesPastTheKernelsAreErrorsNamingTheKey) {
  EXPECT_THAT(loadError({{"context_length", 0xFFFFFFFFu}}),
              HasSubstr("context_length 4294967295 must be in [1, 1048576]"));
  EXPECT_THAT(loadError({{"context_length", 0u}}),
              HasSubstr("context_length 0 must be in [1, 1048576]"));
  EXPECT_THAT(loadError({{"attention.key_length", 512u}}),
              HasSubstr("attention.key_length (head dimension) 512 must be "
                        "even and in [2, 256]"));
  EXPECT_THAT(loadError({{"rope.dimension_count", 18u}}),
              HasSubstr("rope.dimension_count 18 must be even and in [2, 16] "
                        "(the head dimension)"));
}

TEST(ModelLoadLimits, ARopeDimensionOfZeroIsAnError) {
  // Issue 25: 0 loaded, rotated nothing and changed every answer (63 was
  // refused as odd).
  EXPECT_THAT(loadError({{"rope.dimension_count", 0u}}),
              HasSubstr("rope.dimension_count 0 must be even and in [2, 16] "
                        "(the head dimension)"));
  EXPECT_THAT(loadError({{"rope.dimension_count", 15u}}),
              HasSubstr("rope.dimension_count 15 must be even"));
  EXPECT_EQ(loadError({{"rope.dimension_count", 8u}}), "");
  EXPECT_EQ(loadError({{"rope.dimension_count", 16u}}), "");
}

TEST(ModelLoadLimits, HeadCountsThatDoNotDivideTheDimensionsAreErrors) {
  // 64 / 3 heads truncated to a head dimension of 21 (odd) or, with 6
  // heads, to 10: the error named a tensor shape, not the key.
  EXPECT_THAT(loadError({{"attention.head_count", 6u},
                         {"attention.head_count_kv", 6u}}),
              HasSubstr("embedding_length 64 is not a multiple of "
                        "attention.head_count 6 (and no "
                        "attention.key_length gives the head dimension)"));
  EXPECT_THAT(loadError({{"attention.head_count_kv", 3u}}),
              HasSubstr("attention.head_count 4 is not a multiple of "
                        "head_count_kv 3"));
  // A value width other than the key width is not supported; it was
  // ignored.
  EXPECT_THAT(loadError({{"attention.value_length", 8u}}),
              HasSubstr("attention.value_length 8 differs from "
                        "attention.key_length 16"));
  EXPECT_EQ(loadError({{"attention.value_length", 16u}}), "");
}

TEST(ModelLoadLimits, NonFiniteWeightsAreErrorsNamingTheTensor) {
  // Issue 25: a NaN norm weight loaded; every output was NaN and the model
  // generated 0 tokens without a word.
  const float nan = std::nanf("");
  const float infinity = std::numeric_limits<float>::infinity();
  EXPECT_THAT(loadError({}, Poison{"blk.0.attn_norm.weight", 5, nan}),
              HasSubstr("tensor 'blk.0.attn_norm.weight': element [5] is "
                        "nan: a weight that is not finite makes every "
                        "output NaN"));
  EXPECT_THAT(loadError({}, Poison{"output_norm.weight", 63, -infinity}),
              HasSubstr("tensor 'output_norm.weight': element [63] is "
                        "infinite"));
  // Matrices too, as they are dequantized for packing (row 2, column 3).
  EXPECT_THAT(loadError({}, Poison{"blk.1.ffn_down.weight", 2 * 128 + 3, nan}),
              HasSubstr("tensor 'blk.1.ffn_down.weight': element [3, 2] is "
                        "nan"));
  // The tied output head is the embedding.
  EXPECT_THAT(loadError({}, Poison{"token_embd.weight", 64 * 9, infinity}),
              HasSubstr("tensor 'token_embd.weight': element [0, 9] is "
                        "infinite"));
}

TEST(ModelLoadLimits, NonFiniteVectorsAreErrorsWithWeightsOnADevice) {
  // A device backend reads the matrices itself; the small tensors are
  // checked here all the same.
  ModelOptions deviceWeights;
  deviceWeights.hostWeights = false;
  EXPECT_EQ(loadError({}, {}, deviceWeights), "");
  EXPECT_THAT(loadError({}, Poison{"blk.1.ffn_norm.weight", 0, std::nanf("")},
                        deviceWeights),
              HasSubstr("tensor 'blk.1.ffn_norm.weight': element [0] is nan"));
}

TEST(ModelLoadLimits, NonFiniteConstantsAreErrors) {
  // Both loaded and answered garbage.
  const float infinity = std::numeric_limits<float>::infinity();
  EXPECT_THAT(loadError({{"rope.freq_base", infinity}}),
              HasSubstr("rope.freq_base inf must be positive and finite"));
  EXPECT_THAT(loadError({{"attention.layer_norm_rms_epsilon", infinity}}),
              HasSubstr("attention.layer_norm_rms_epsilon inf must be "
                        "positive and finite"));
  EXPECT_THAT(loadError({{"attention.layer_norm_rms_epsilon", std::nanf("")}}),
              HasSubstr("attention.layer_norm_rms_epsilon nan must be "
                        "positive and finite"));
}

} // namespace
