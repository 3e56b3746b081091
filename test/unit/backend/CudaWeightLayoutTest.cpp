//===- CudaWeightLayoutTest.cpp - The device weight arena, planned on the host
//
// On the synthetic models test/data/synthetic generates (llama: untied head;
// qwen2: Q/K/V biases), and on SmolLM2 (tied head, Q4_1 blocks with Q6_K/
// Q8_0 tensors) when installed.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/CudaWeightLayout.h"

#include "runtime/backend/CpuBackend.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Model.h"
#include "runtime/model/ModelConfig.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace {

using spanc::backend::CudaWeightLayout;
using spanc::backend::DeviceMatrix;
using spanc::backend::planCudaWeights;
using spanc::model::GgmlType;
using spanc::model::GgufFile;
using spanc::model::ModelConfig;

struct Loaded {
  std::unique_ptr<GgufFile> file;
  ModelConfig config;
};

std::optional<Loaded> open(const std::string &path) {
  auto file = GgufFile::open(path);
  EXPECT_TRUE(bool(file)) << llvm::toString(file.takeError());
  if (!file)
    return std::nullopt;
  auto config = ModelConfig::fromGguf(**file);
  EXPECT_TRUE(bool(config)) << llvm::toString(config.takeError());
  if (!config)
    return std::nullopt;
  return Loaded{std::move(*file), *config};
}

bool everyType(GgmlType) { return true; }

/// Every region of the arena, [offset, offset + bytes).
std::vector<std::pair<uint64_t, uint64_t>>
regions(const CudaWeightLayout &layout) {
  std::vector<std::pair<uint64_t, uint64_t>> result;
  auto matrix = [&](const DeviceMatrix &m) {
    result.push_back({m.offset, m.offset + m.bytes()});
  };
  auto vector = [&](const spanc::backend::DeviceVector &v) {
    if (!v.empty())
      result.push_back({v.offset, v.offset + v.size * 4});
  };
  matrix(layout.embedding);
  for (const auto &layer : layout.layers) {
    vector(layer.attentionNorm);
    vector(layer.feedForwardNorm);
    matrix(layer.queryKeyValue);
    vector(layer.queryKeyValueBias);
    matrix(layer.attentionOutput);
    matrix(layer.gateUp);
    matrix(layer.down);
  }
  vector(layout.outputNorm);
  if (layout.output.offset != layout.embedding.offset)
    matrix(layout.output);
  return result;
}

void expectDisjointAlignedAndInside(const CudaWeightLayout &layout) {
  auto all = regions(layout);
  std::sort(all.begin(), all.end());
  for (size_t index = 0; index < all.size(); ++index) {
    EXPECT_EQ(all[index].first % CudaWeightLayout::kAlignment, 0u);
    EXPECT_LE(all[index].second, layout.arenaBytes);
    if (index > 0) {
      EXPECT_LE(all[index - 1].second, all[index].first) << "overlap";
    }
  }
}

TEST(CudaWeightLayout, FusesQkvAndGateUpAsTheCpuWeightsDo) {
  auto loaded = open("test/data/synthetic/tiny-llama-synthetic.gguf");
  ASSERT_TRUE(loaded);
  const ModelConfig &config = loaded->config;
  auto layout = planCudaWeights(*loaded->file, config, everyType);
  ASSERT_TRUE(bool(layout)) << llvm::toString(layout.takeError());
  ASSERT_EQ(layout->layers.size(), config.numLayers);
  const auto &layer = layout->layers[0];
  const uint64_t queryDim = uint64_t(config.numHeads) * config.headDim;
  const uint64_t kvDim = uint64_t(config.numKvHeads) * config.headDim;
  EXPECT_EQ(layer.queryKeyValue.rows, queryDim + 2 * kvDim);
  EXPECT_EQ(layer.queryKeyValue.columns, config.embeddingDim);
  EXPECT_EQ(layer.gateUp.rows, 2u * config.feedForwardDim);
  EXPECT_EQ(layer.down.rows, config.embeddingDim);
  EXPECT_EQ(layer.down.columns, config.feedForwardDim);
  EXPECT_EQ(layer.attentionOutput.columns, queryDim);
  EXPECT_TRUE(layer.queryKeyValueBias.empty());
  EXPECT_EQ(layout->embedding.rows, config.vocabSize);
  // Untied: the head has its own matrix.
  EXPECT_NE(layout->output.offset, layout->embedding.offset);
  expectDisjointAlignedAndInside(*layout);

  // Q, K and V land one after the other in the fused matrix.
  std::vector<uint64_t> qkvRows;
  for (const auto &conversion : layout->conversions)
    if (conversion.isMatrix &&
        conversion.matrix.offset == layer.queryKeyValue.offset)
      qkvRows.push_back(conversion.firstRow);
  EXPECT_EQ(qkvRows, (std::vector<uint64_t>{0, queryDim, queryDim + kvDim}));
  // Every tensor of the file but none twice (norms, 7 matrices a layer,
  // embedding, head, output norm).
  std::set<std::string> names;
  for (const auto &conversion : layout->conversions)
    EXPECT_TRUE(names.insert(conversion.tensor->name).second)
        << conversion.tensor->name;
  EXPECT_EQ(names.size(), loaded->file->tensors().size());
}

TEST(CudaWeightLayout, StagingFitsTheLargestRawTensorTheDeviceReads) {
  auto loaded = open("test/data/synthetic/tiny-llama-synthetic.gguf");
  ASSERT_TRUE(loaded);
  auto layout = planCudaWeights(*loaded->file, loaded->config, everyType);
  ASSERT_TRUE(bool(layout));
  uint64_t largest = 0;
  for (const auto &conversion : layout->conversions) {
    if (conversion.isMatrix)
      EXPECT_TRUE(conversion.onDevice);
    else
      EXPECT_FALSE(conversion.onDevice) << "vectors convert on the host";
    if (conversion.onDevice)
      largest = std::max(largest, conversion.tensor->numBytes);
  }
  EXPECT_EQ(layout->stagingBytes, largest);

  // A kernel that reads nothing: every matrix converts on the host and
  // nothing is staged.
  auto hostOnly = planCudaWeights(*loaded->file, loaded->config,
                                  [](GgmlType) { return false; });
  ASSERT_TRUE(bool(hostOnly));
  EXPECT_EQ(hostOnly->stagingBytes, 0u);
  EXPECT_GE(hostOnly->hostConversionBytes,
            hostOnly->layers[0].gateUp.bytes() / 2);
  EXPECT_EQ(hostOnly->arenaBytes, layout->arenaBytes);
}

TEST(CudaWeightLayout, QwenBiasesAreStackedLikeTheirRows) {
  auto loaded = open("test/data/synthetic/tiny-qwen2-synthetic.gguf");
  ASSERT_TRUE(loaded);
  auto layout = planCudaWeights(*loaded->file, loaded->config, everyType);
  ASSERT_TRUE(bool(layout)) << llvm::toString(layout.takeError());
  const auto &layer = layout->layers[0];
  EXPECT_EQ(layer.queryKeyValueBias.size, layer.queryKeyValue.rows);
  expectDisjointAlignedAndInside(*layout);
}

TEST(CudaWeightLayout, AMissingTensorIsNamed) {
  auto loaded = open("test/data/synthetic/tiny-llama-synthetic.gguf");
  ASSERT_TRUE(loaded);
  ModelConfig deeper = loaded->config;
  deeper.numLayers += 1;
  auto layout = planCudaWeights(*loaded->file, deeper, everyType);
  ASSERT_FALSE(bool(layout));
  EXPECT_NE(llvm::toString(layout.takeError())
                .find("tensor 'blk." + std::to_string(deeper.numLayers - 1) +
                      ".attn_norm.weight': missing"),
            std::string::npos);
}

TEST(CudaWeightLayout, SmolLM2TiesItsHeadToTheEmbedding) {
  const char *root = std::getenv("SPANC_ROOT");
  std::string path = std::string(root ? root : ".") +
                     "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!llvm::sys::fs::exists(path))
    GTEST_SKIP() << "SmolLM2 is not installed (tools/setup.sh)";
  auto loaded = open(path);
  ASSERT_TRUE(loaded);
  auto layout = planCudaWeights(*loaded->file, loaded->config, everyType);
  ASSERT_TRUE(bool(layout)) << llvm::toString(layout.takeError());
  EXPECT_EQ(layout->output.offset, layout->embedding.offset);
  expectDisjointAlignedAndInside(*layout);
  // 135M parameters in bf16, plus norms: about 270 MB.
  EXPECT_GT(layout->arenaBytes, 250u << 20);
  EXPECT_LT(layout->arenaBytes, 300u << 20);
}

} // namespace

namespace {

TEST(ModelWithoutHostWeights, KeepsItsConfigurationAndRopeButRefusesForward) {
  // What a device backend loads (ModelOptions::hostWeights = false): no
  // packed weights, the RoPE table it copies, and a clear error should the
  // CPU forward pass be asked for.
  spanc::model::ModelOptions options;
  options.hostWeights = false;
  auto model = spanc::model::Model::load(
      "test/data/synthetic/tiny-llama-synthetic.gguf", options);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  EXPECT_FALSE((*model)->hasHostWeights());
  EXPECT_EQ((*model)->rope().numPositions(),
            int64_t((*model)->config().contextLength));
  auto cpu = spanc::backend::CpuBackend::create(**model, 4, 16,
                                                /*keysRotated=*/false);
  ASSERT_TRUE(bool(cpu));
  std::vector<int32_t> tokens = {1}, blocks = {0}, valid = {1};
  spanc::model::ForwardSequence sequence{tokens, tokens, blocks, valid};
  spanc::model::ForwardOutput output;
  llvm::Error error = (*cpu)->forward(sequence, output);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("without host weights"),
            std::string::npos);
}

} // namespace
