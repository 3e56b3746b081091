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
#include <variant>

using namespace spanc::model;
using ::testing::HasSubstr;

namespace {

using MetadataValue = std::variant<uint32_t, float>;

/// A complete llama decoder; `changed` replaces the value of a key (without
/// the "llama." prefix).
std::string writeDecoder(const std::map<std::string, MetadataValue> &changed,
                         const std::string &name) {
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

/// Model::load's error for the decoder with `changed`, or "" if it loads.
std::string loadError(const std::map<std::string, MetadataValue> &changed) {
  static int files = 0;
  std::string path = writeDecoder(changed, "m" + std::to_string(files++));
  auto model = Model::load(path);
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
              HasSubstr("rope.dimension_count 18 must be even and at most "
                        "the head dimension 16"));
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
