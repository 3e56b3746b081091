//===- ModelConfigTest.cpp - Hyperparameters from GGUF metadata -----------===//
//
// Synthetic GGUF files (GgufWriter) cover the families and the error paths;
// the installed SmolLM2 is checked against its published configuration
// (HF config.json: hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1536,
// rope_theta 1e5, 8192 positions, tied embeddings).
//
//===----------------------------------------------------------------------===//

#include "runtime/model/ModelConfig.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/GgufWriter.h"

#include "llvm/Support/FileSystem.h"

#include "gtest/gtest.h"

#include <cstdlib>

using namespace spanc::model;

namespace {

/// A minimal decoder description of `arch` with a [64, 10] embedding.
GgufWriter decoder(const std::string &arch, uint32_t contextLength = 256) {
  GgufWriter writer;
  writer.addString("general.architecture", arch);
  writer.addUInt32(arch + ".block_count", 2);
  writer.addUInt32(arch + ".embedding_length", 64);
  writer.addUInt32(arch + ".feed_forward_length", 128);
  writer.addUInt32(arch + ".attention.head_count", 4);
  writer.addUInt32(arch + ".attention.head_count_kv", 2);
  writer.addUInt32(arch + ".context_length", contextLength);
  writer.addFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  writer.addFloat32(arch + ".rope.freq_base", 1e6f);
  writer.addTensorF32("token_embd.weight", {64, 10},
                      std::vector<float>(640, 0.0f));
  return writer;
}

llvm::Expected<ModelConfig> configOf(const GgufWriter &writer) {
  auto file = GgufFile::openBuffer(writer.write(), "m.gguf");
  if (!file)
    return file.takeError();
  return ModelConfig::fromGguf(**file);
}

} // namespace

TEST(ModelConfig, ReadsALlamaDecoder) {
  GgufWriter writer = decoder("llama");
  writer.addTensorF32("output.weight", {64, 10}, std::vector<float>(640));
  auto config = configOf(writer);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->family, ModelFamily::Llama);
  EXPECT_EQ(config->numLayers, 2u);
  EXPECT_EQ(config->embeddingDim, 64u);
  EXPECT_EQ(config->feedForwardDim, 128u);
  EXPECT_EQ(config->numHeads, 4u);
  EXPECT_EQ(config->numKvHeads, 2u);
  EXPECT_EQ(config->headDim, 16u);
  EXPECT_EQ(config->rotaryDim, 16u);
  EXPECT_EQ(config->vocabSize, 10u);
  EXPECT_EQ(config->contextLength, 256u);
  EXPECT_FLOAT_EQ(config->rmsEpsilon, 1e-6f);
  EXPECT_FLOAT_EQ(config->ropeTheta, 1e6f);
  EXPECT_EQ(config->ropeOrder, RopeOrder::Normal);
  EXPECT_EQ(config->ropeScaling, RopeScalingType::None);
  EXPECT_FALSE(config->tiedOutput);
  EXPECT_FALSE(config->qkvBias);
}

TEST(ModelConfig, Qwen2RotatesHalvesAndHasQkvBias) {
  GgufWriter writer = decoder("qwen2");
  writer.addTensorF32("blk.0.attn_q.bias", {64}, std::vector<float>(64));
  auto config = configOf(writer);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->family, ModelFamily::Qwen2);
  EXPECT_EQ(config->ropeOrder, RopeOrder::NeoX);
  EXPECT_TRUE(config->qkvBias);
  EXPECT_TRUE(config->tiedOutput);
}

TEST(ModelConfig, ReadsRopeScaling) {
  GgufWriter writer = decoder("llama");
  writer.addString("llama.rope.scaling.type", "yarn");
  writer.addFloat32("llama.rope.scaling.factor", 4.0f);
  writer.addUInt32("llama.rope.scaling.original_context_length", 64);
  auto config = configOf(writer);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->ropeScaling, RopeScalingType::Yarn);
  EXPECT_FLOAT_EQ(config->ropeScalingFactor, 4.0f);
  EXPECT_EQ(config->ropeOriginalContext, 64u);

  GgufWriter linear = decoder("mistral");
  linear.addFloat32("mistral.rope.scale_linear", 2.0f);
  config = configOf(linear);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->family, ModelFamily::Mistral);
  EXPECT_EQ(config->ropeScaling, RopeScalingType::Linear);
  EXPECT_FLOAT_EQ(config->ropeScalingFactor, 2.0f);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  GgufWriter unknown = decoder("gpt2");
  EXPECT_EQ(llvm::toString(configOf(unknown).takeError()),
            "m.gguf: unsupported architecture 'gpt2' (supported: llama, "
            "mistral, qwen2)");
  GgufWriter missing;
  missing.addString("general.architecture", "llama");
  EXPECT_EQ(llvm::toString(configOf(missing).takeError()),
            "m.gguf: missing metadata key 'llama.block_count'");
  GgufWriter heads = decoder("llama");
  heads.addUInt32("llama.attention.head_count_kv", 3); // duplicate key
  EXPECT_EQ(llvm::toString(configOf(heads).takeError()),
            "m.gguf: duplicate metadata key 'llama.attention.head_count_kv'");
  GgufWriter scaling = decoder("llama");
  scaling.addString("llama.rope.scaling.type", "ntk");
  EXPECT_EQ(llvm::toString(configOf(scaling).takeError()),
            "m.gguf: metadata key 'llama.rope.scaling.type' is 'ntk' "
            "(supported: none, linear, yarn)");
}

TEST(ModelConfig, ShapesOutsideTheKernelsLimitsAreRefusedByName) {
  // runtime/kernels/Limits.h: the attention and KV storage arrays.
  GgufWriter wideHeads = decoder("llama");
  wideHeads.addUInt32("llama.attention.key_length", 512);
  auto config = configOf(wideHeads);
  ASSERT_FALSE(static_cast<bool>(config));
  std::string message = llvm::toString(config.takeError());
  EXPECT_NE(message.find("attention.key_length"), std::string::npos) << message;
  EXPECT_NE(message.find("256"), std::string::npos) << message;

  for (uint32_t contextLength : {0u, (1u << 20) + 1}) {
    auto refused = configOf(decoder("llama", contextLength));
    ASSERT_FALSE(static_cast<bool>(refused));
    message = llvm::toString(refused.takeError());
    EXPECT_NE(message.find("context_length"), std::string::npos) << message;
  }
}

TEST(ModelConfig, MatchesSmolLM2sPublishedConfiguration) {
  const char *root = std::getenv("SPANC_ROOT");
  std::string path = std::string(root ? root : ".") +
                     "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!llvm::sys::fs::exists(path))
    GTEST_SKIP() << "model not installed (tools/setup.sh): " << path;
  auto file = GgufFile::open(path);
  ASSERT_TRUE(static_cast<bool>(file));
  auto config = ModelConfig::fromGguf(**file);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->architecture, "llama");
  EXPECT_EQ(config->numLayers, 30u);
  EXPECT_EQ(config->embeddingDim, 576u);
  EXPECT_EQ(config->feedForwardDim, 1536u);
  EXPECT_EQ(config->numHeads, 9u);
  EXPECT_EQ(config->numKvHeads, 3u);
  EXPECT_EQ(config->headDim, 64u);
  EXPECT_EQ(config->vocabSize, 49152u);
  EXPECT_EQ(config->contextLength, 8192u);
  EXPECT_FLOAT_EQ(config->ropeTheta, 100000.0f);
  EXPECT_FLOAT_EQ(config->rmsEpsilon, 1e-5f);
  EXPECT_EQ(config->ropeOrder, RopeOrder::Normal);
  EXPECT_TRUE(config->tiedOutput);
  EXPECT_FALSE(config->qkvBias);
}

TEST(ModelConfig, CountsTheFlopsOfAPrefill) {
  // SmolLM2-135M's shape: a 512-token prefill is the 117.8 GFLOP that
  // bench/results/engine*.md divide their times by.
  ModelConfig config;
  config.numLayers = 30;
  config.embeddingDim = 576;
  config.feedForwardDim = 1536;
  config.numHeads = 9;
  config.numKvHeads = 3;
  config.headDim = 64;
  config.vocabSize = 49152;
  // QKV 576 x 960, output 576 x 576, gate|up 576 x 3072, down 1536 x 576.
  EXPECT_EQ(config.projectionFlopsPerLayer(), 2.0 * 3538944);
  EXPECT_EQ(config.attentionFlopsPerPair(), 4.0 * 9 * 64);
  EXPECT_EQ(config.outputHeadFlopsPerRow(), 2.0 * 576 * 49152);
  EXPECT_EQ(config.prefillFlops(0), 0.0);
  // One token: its projections, one pair per layer and one row of logits.
  EXPECT_EQ(config.prefillFlops(1),
            30 * (2.0 * 3538944 + 2304) + 2.0 * 576 * 49152);
  // 512 tokens: the last layer's rows but the last stop after their QKV.
  EXPECT_EQ(config.queryKeyValueFlopsPerRow(), 2.0 * 576 * 960);
  EXPECT_EQ(
      config.prefillFlops(512),
      29 * (512 * 2.0 * 3538944 + 512 * 513 / 2 * 2304.0) +
          (512 * 2.0 * 576 * 960 + 2.0 * (3538944 - 576 * 960) + 512 * 2304.0) +
          2.0 * 576 * 49152);
}

TEST(ModelConfig, AVocabularyOtherThanTheEmbeddingRowsIsAnError) {
  // Token ids past the embedding's rows would read past it; ids without a
  // text would decode to nothing.
  GgufWriter writer = decoder("llama");
  writer.addStringArray("tokenizer.ggml.tokens",
                        {"a", "b", "c", "d", "e", "f", "g", "h", "i"});
  EXPECT_EQ(llvm::toString(configOf(writer).takeError()),
            "m.gguf: tokenizer.ggml.tokens has 9 entries but "
            "token_embd.weight has 10 rows");
}
