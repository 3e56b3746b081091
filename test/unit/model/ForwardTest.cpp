//===- ForwardTest.cpp - The forward pass agrees with itself across batching
//===//
//
// With the real SmolLM2 model (skipped when absent) and arbitrary token ids:
// one prefill, chunked prefill and token-by-token decode give the same
// logits; several sequences batched give what each gives alone; a page list
// with padding slots and scattered blocks gives what a contiguous one does
// (padding takes no position); rope-in-kernel storage gives what rotated
// storage does; a decode step's layers in one parallel region give the
// kernel-by-kernel path's bits. Agreement with llama.cpp is tested in
// ReferenceTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/CpuBackend.h"
#include "runtime/model/Model.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

namespace {

using namespace spanc;
using namespace spanc::model;

std::string modelPath() {
  const char *root = std::getenv("SPANC_ROOT");
  return std::string(root ? root : ".") +
         "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/// One model for the whole suite (loading packs 135M weights), with f32
/// GEMMs: bf16 kernels for other row counts sum in another order, which
/// would hide small batching bugs behind a loose tolerance.
Model *sharedModel() {
  static std::unique_ptr<Model> model = [] {
    std::unique_ptr<Model> loaded;
    if (!llvm::sys::fs::exists(modelPath()))
      return loaded;
    ModelOptions options;
    options.forceF32 = true;
    options.halfPrecisionKv = false; // exact K for the rope-in-kernel check
    auto result = Model::load(modelPath(), options);
    if (!result) {
      ADD_FAILURE() << llvm::toString(result.takeError());
      return loaded;
    }
    return std::move(*result);
  }();
  return model.get();
}

/// One model with the default options (bf16 GEMMs, int8 decode rows, f16
/// K/V), for the checks that hold bit for bit on those numerics.
Model *defaultModel() {
  static std::unique_ptr<Model> model = [] {
    std::unique_ptr<Model> loaded;
    if (!llvm::sys::fs::exists(modelPath()))
      return loaded;
    auto result = Model::load(modelPath(), ModelOptions());
    if (!result) {
      ADD_FAILURE() << llvm::toString(result.takeError());
      return loaded;
    }
    return std::move(*result);
  }();
  return model.get();
}

#define REQUIRE_MODEL()                                                        \
  Model *model = sharedModel();                                                \
  if (!model)                                                                  \
    GTEST_SKIP() << "model not found at " << modelPath();

std::vector<int32_t> someTokens(int count, int salt) {
  std::vector<int32_t> tokens;
  for (int index = 0; index < count; ++index)
    tokens.push_back(
        int32_t((index * 7919 + salt * 104729 + 17) % 49000 + 100));
  return tokens;
}

std::vector<int32_t> iota(int64_t first, int64_t count) {
  std::vector<int32_t> values;
  for (int64_t index = 0; index < count; ++index)
    values.push_back(int32_t(first + index));
  return values;
}

/// A contiguous page list over blocks [firstBlock, ...) for `length` tokens.
struct Pages {
  std::vector<int32_t> blockIds, validTokens;
  Pages(int32_t firstBlock, int64_t length, int blockSize = 16) {
    for (int64_t start = 0; start < length; start += blockSize) {
      blockIds.push_back(firstBlock++);
      validTokens.push_back(
          int32_t(std::min<int64_t>(blockSize, length - start)));
    }
  }
};

/// A CPU backend with 256 blocks of 16 tokens (the CPU pass over its own
/// K/V memory).
std::unique_ptr<backend::CpuBackend> makeStorage(Model &model,
                                                 bool keysRotated = true) {
  auto cpu = backend::CpuBackend::create(model, 256, 16, keysRotated);
  EXPECT_TRUE(bool(cpu));
  return std::move(*cpu);
}

float maxDifference(const float *a, const float *b, int64_t count) {
  float worst = 0;
  for (int64_t index = 0; index < count; ++index)
    worst = std::max(worst, std::abs(a[index] - b[index]));
  return worst;
}

// f32 GEMMs for other row counts still sum in another order; logits are
// O(10).
constexpr float kTolerance = 2e-3f;

TEST(Forward, ChunkedPrefillAndDecodeMatchOnePrefill) {
  REQUIRE_MODEL();
  const int length = 40;
  std::vector<int32_t> tokens = someTokens(length, 1);
  std::vector<int32_t> positions = iota(0, length);
  auto storage = makeStorage(*model);
  Pages pages(0, length);
  ForwardSequence all{tokens, positions, pages.blockIds, pages.validTokens,
                      LogitsRequest::All};
  ForwardOutput reference;
  ASSERT_FALSE(bool(storage->forward(all, reference)));
  ASSERT_EQ(reference.rowOffsets.back(), length);
  for (int64_t index = 0; index < reference.vocabSize * length; ++index)
    ASSERT_TRUE(std::isfinite(reference.logits[size_t(index)]));

  // The same tokens in chunks of 17, 16 and then one at a time, into other
  // blocks.
  auto chunked = makeStorage(*model);
  int done = 0;
  for (int chunk : {17, 16, 1, 1, 1, 1, 1, 1, 1}) {
    Pages prefix(100, done + chunk);
    std::vector<int32_t> chunkTokens(tokens.begin() + done,
                                     tokens.begin() + done + chunk);
    std::vector<int32_t> chunkPositions = iota(done, chunk);
    ForwardSequence step{chunkTokens, chunkPositions, prefix.blockIds,
                         prefix.validTokens, LogitsRequest::All};
    ForwardOutput output;
    ASSERT_FALSE(bool(chunked->forward(step, output)));
    for (int row = 0; row < chunk; ++row)
      EXPECT_LT(maxDifference(output.row(row), reference.row(done + row),
                              reference.vocabSize),
                kTolerance)
          << "token " << done + row;
    done += chunk;
  }
}

// A blend recomputes chosen tokens as sequences of one row each over a
// shared page list, all in one step (sched::BlendTask): at every layer a
// row reads the rows before it written in that same layer, so every token
// of a prompt run that way matches the causal run.
TEST(Forward, OneRowPerSequenceInOneStepMatchesACausalRun) {
  REQUIRE_MODEL();
  for (bool keysRotated : {true, false}) {
    const int length = 37;
    std::vector<int32_t> tokens = someTokens(length, 4);
    std::vector<int32_t> positions = iota(0, length);
    auto storage = makeStorage(*model, keysRotated);
    Pages pages(0, length);
    ForwardSequence all{tokens, positions, pages.blockIds, pages.validTokens,
                        LogitsRequest::All};
    ForwardOutput reference;
    ASSERT_FALSE(bool(storage->forward(all, reference)));

    auto rows = makeStorage(*model, keysRotated);
    std::vector<std::vector<int32_t>> valid(length);
    std::vector<ForwardSequence> batch;
    for (int token = 0; token < length; ++token) {
      size_t numPages = size_t(token / 16 + 1);
      valid[size_t(token)].assign(pages.validTokens.begin(),
                                  pages.validTokens.begin() + numPages);
      valid[size_t(token)].back() = token % 16 + 1;
      ForwardSequence sequence;
      sequence.tokens = llvm::ArrayRef<int32_t>(tokens).slice(size_t(token), 1);
      sequence.positions =
          llvm::ArrayRef<int32_t>(positions).slice(size_t(token), 1);
      sequence.blockIds =
          llvm::ArrayRef<int32_t>(pages.blockIds).take_front(numPages);
      sequence.validTokens = valid[size_t(token)];
      sequence.logits = LogitsRequest::Last;
      sequence.rows = RowKind::Prompt;
      batch.push_back(sequence);
    }
    ForwardOutput output;
    ASSERT_FALSE(bool(rows->forward(batch, output)));
    for (int token = 0; token < length; ++token)
      EXPECT_LT(maxDifference(output.row(token), reference.row(token),
                              reference.vocabSize),
                kTolerance)
          << "token " << token << (keysRotated ? " rerope" : " rope-in-kernel");
  }
}

TEST(Forward, BatchedSequencesMatchEachAlone) {
  REQUIRE_MODEL();
  std::vector<int32_t> first = someTokens(23, 2), second = someTokens(5, 3);
  std::vector<int32_t> firstPositions = iota(0, 23),
                       secondPositions = iota(0, 5);
  Pages firstPages(0, 23), secondPages(10, 5);
  auto storage = makeStorage(*model);
  ForwardSequence batch[] = {{first, firstPositions, firstPages.blockIds,
                              firstPages.validTokens, LogitsRequest::Last},
                             {second, secondPositions, secondPages.blockIds,
                              secondPages.validTokens, LogitsRequest::All}};
  ForwardOutput together;
  ASSERT_FALSE(bool(storage->forward(batch, together)));
  ASSERT_EQ(together.rowOffsets.back(), 1 + 5);
  for (int index = 0; index < 2; ++index) {
    auto alone = makeStorage(*model);
    ForwardOutput output;
    ASSERT_FALSE(bool(alone->forward(batch[index], output)));
    for (int64_t row = 0; row < output.rowOffsets.back(); ++row)
      EXPECT_LT(
          maxDifference(output.row(row),
                        together.row(together.rowOffsets[size_t(index)] + row),
                        output.vocabSize),
          kTolerance)
          << "sequence " << index << " row " << row;
  }
  // Then one decode step for both at once, against each alone.
  int32_t nextFirst = 321, nextSecond = 4321;
  Pages firstAfter(0, 24), secondAfter(10, 6);
  int32_t firstNextPosition = 23, secondNextPosition = 5;
  ForwardSequence decode[] = {
      {nextFirst, firstNextPosition, firstAfter.blockIds,
       firstAfter.validTokens, LogitsRequest::Last},
      {nextSecond, secondNextPosition, secondAfter.blockIds,
       secondAfter.validTokens, LogitsRequest::Last}};
  ForwardOutput decoded;
  ASSERT_FALSE(bool(storage->forward(decode, decoded)));
  for (int index = 0; index < 2; ++index) {
    ForwardOutput alone;
    ASSERT_FALSE(bool(storage->forward(decode[index], alone)));
    EXPECT_LT(maxDifference(alone.row(0), decoded.row(index), alone.vocabSize),
              kTolerance);
  }
}

TEST(Forward, PaddingSlotsTakeNoPosition) {
  REQUIRE_MODEL();
  // 10 tokens of a "span" in a block padded to 16, then 20 more tokens: the
  // same logits as 30 contiguous tokens.
  std::vector<int32_t> tokens = someTokens(30, 4), positions = iota(0, 30);
  auto contiguousStorage = makeStorage(*model);
  Pages contiguous(0, 30);
  ForwardOutput reference;
  ASSERT_FALSE(bool(contiguousStorage->forward(
      ForwardSequence{tokens, positions, contiguous.blockIds,
                      contiguous.validTokens, LogitsRequest::All},
      reference)));

  auto storage = makeStorage(*model);
  std::vector<int32_t> spanTokens(tokens.begin(), tokens.begin() + 10);
  std::vector<int32_t> spanPositions = iota(0, 10);
  std::vector<int32_t> spanBlocks = {37}, spanValid = {10};
  ForwardOutput spanOutput;
  ASSERT_FALSE(bool(
      storage->forward(ForwardSequence{spanTokens, spanPositions, spanBlocks,
                                       spanValid, LogitsRequest::All},
                       spanOutput)));
  std::vector<int32_t> tailTokens(tokens.begin() + 10, tokens.end());
  std::vector<int32_t> tailPositions = iota(10, 20);
  std::vector<int32_t> blocks = {37, 5, 90}, valid = {10, 16, 4};
  ForwardOutput tailOutput;
  ASSERT_FALSE(
      bool(storage->forward(ForwardSequence{tailTokens, tailPositions, blocks,
                                            valid, LogitsRequest::All},
                            tailOutput)));
  for (int row = 0; row < 10; ++row)
    EXPECT_LT(maxDifference(spanOutput.row(row), reference.row(row),
                            reference.vocabSize),
              kTolerance);
  for (int row = 0; row < 20; ++row)
    EXPECT_LT(maxDifference(tailOutput.row(row), reference.row(10 + row),
                            reference.vocabSize),
              kTolerance)
        << "tail row " << row;
}

TEST(Forward, RopeInKernelMatchesRotatedKeys) {
  REQUIRE_MODEL();
  std::vector<int32_t> tokens = someTokens(33, 5), positions = iota(0, 33);
  Pages pages(3, 33);
  ForwardSequence sequence{tokens, positions, pages.blockIds, pages.validTokens,
                           LogitsRequest::All};
  auto rotated = makeStorage(*model, true);
  auto unrotated = makeStorage(*model, false);
  ForwardOutput reference, output;
  ASSERT_FALSE(bool(rotated->forward(sequence, reference)));
  ASSERT_FALSE(bool(unrotated->forward(sequence, output)));
  for (int row = 0; row < 33; ++row)
    EXPECT_LT(
        maxDifference(output.row(row), reference.row(row), reference.vocabSize),
        kTolerance)
        << "row " << row;
}

// A decode step of a few rows runs its layers in one parallel region
// (runtime/backend/cpu/ForwardDecodeTeam.cpp): every logit keeps the bits
// of the kernel-by-kernel path, on the default numerics (int8 decode rows,
// f16 K/V), with K stored rotated and rope-in-kernel, for one, two and
// four decode rows and a step past the limit of rows (kernel path in both).
TEST(Forward, DecodeInOneRegionGivesTheKernelPathsBits) {
  Model *loaded = defaultModel();
  if (!loaded)
    GTEST_SKIP() << "model not found at " << modelPath();
  Model &model = *loaded;
  if (!model.quantizedDecodeRows())
    GTEST_SKIP() << "this kernel path multiplies decode rows on the packed "
                    "weights (no int8 GEMV), so no step runs in one region";
  // The region needs a team whatever the host's cores.
  const int savedThreads = omp_get_max_threads();
  omp_set_num_threads(2);
  constexpr int kSequences = 5;
  for (bool keysRotated : {true, false}) {
    std::unique_ptr<backend::CpuBackend> team = makeStorage(model, keysRotated);
    std::unique_ptr<backend::CpuBackend> kernels =
        makeStorage(model, keysRotated);
    kernels->pass().enableLayersInTeam(false);
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int> lengths;
    for (int index = 0; index < kSequences; ++index) {
      tokens.push_back(someTokens(40, 10 + index));
      lengths.push_back(20 + 3 * index);
    }
    auto step = [&](int first, int count, bool prompt) {
      std::vector<std::vector<int32_t>> stepTokens, positions;
      std::vector<Pages> pages;
      for (int index = first; index < first + count; ++index) {
        const int start = prompt ? 0 : lengths[size_t(index)];
        const int end = lengths[size_t(index)] + (prompt ? 0 : 1);
        stepTokens.emplace_back(tokens[size_t(index)].begin() + start,
                                tokens[size_t(index)].begin() + end);
        positions.push_back(iota(start, end - start));
        pages.emplace_back(int32_t(index * 8), end);
        if (!prompt)
          ++lengths[size_t(index)];
      }
      std::vector<ForwardSequence> batch;
      for (size_t index = 0; index < stepTokens.size(); ++index)
        batch.push_back({stepTokens[index], positions[index],
                         pages[index].blockIds, pages[index].validTokens,
                         LogitsRequest::Last});
      ForwardOutput byTeam, byKernels;
      ASSERT_FALSE(bool(team->forward(batch, byTeam)));
      ASSERT_FALSE(bool(kernels->forward(batch, byKernels)));
      ASSERT_EQ(byTeam.logits.size(), byKernels.logits.size());
      EXPECT_EQ(std::memcmp(byTeam.logits.data(), byKernels.logits.data(),
                            byTeam.logits.size() * sizeof(float)),
                0)
          << "keys rotated " << keysRotated << ", sequences " << first << ".."
          << first + count - 1 << (prompt ? " (prompt)" : "");
    };
    step(0, kSequences, /*prompt=*/true);
    for (int round = 0; round < 3; ++round) {
      step(0, 1, false);
      step(1, 2, false);
      step(0, 4, false);
      step(0, 5, false);
    }
    EXPECT_EQ(team->pass().profile().passesInOneRegion, 9);
    EXPECT_EQ(kernels->pass().profile().passesInOneRegion, 0);
  }
  omp_set_num_threads(savedThreads);
}

// Where the prompt GEMMs would be f32 (AVX2, or AVX-512 without BF16),
// prompt rows multiply the 4-bit tiles with int8 activations as decode
// rows do (ModelOptions::quantizedPrompt), and the layers keep no f32 copy
// of their weights. Their logits stay near the f32 GEMMs' (the rows'
// activations lose what llama.cpp's Q8_1 blocks lose), and each row's bits
// are its own: a prompt's rows in a batch of two sequences are the rows
// alone.
TEST(Forward, PromptRowsOnTheQuantizedTilesStayNearTheF32Gemms) {
  Model *loaded = defaultModel();
  if (!loaded)
    GTEST_SKIP() << "model not found at " << modelPath();
  Model &model = *loaded;
  if (!model.quantizedPromptRows())
    GTEST_SKIP() << "this kernel path's prompt GEMMs are not f32, or it has "
                    "no int8 kernel for many rows";
  for (const LayerWeights &layer : model.weights().layers()) {
    EXPECT_TRUE(layer.quantizedOnly);
    EXPECT_EQ(layer.queryKeyValue.sizeInBytes() +
                  layer.attentionOutput.sizeInBytes() +
                  layer.gateUp.sizeInBytes() + layer.down.sizeInBytes(),
              0);
  }
  ModelOptions f32Options;
  f32Options.quantizedPrompt = false;
  auto f32 = Model::load(modelPath(), f32Options);
  ASSERT_TRUE(bool(f32)) << llvm::toString(f32.takeError());
  ASSERT_FALSE((*f32)->quantizedPromptRows());
  EXPECT_FALSE((*f32)->weights().layers()[0].quantizedOnly);

  const std::vector<int32_t> first = someTokens(48, 31),
                             second = someTokens(37, 32);
  auto run = [&](Model &on, bool both, ForwardOutput &out) {
    std::unique_ptr<backend::CpuBackend> cpu = makeStorage(on);
    Pages firstPages(0, 48), secondPages(8, 37);
    std::vector<int32_t> firstPositions = iota(0, 48),
                         secondPositions = iota(0, 37);
    std::vector<ForwardSequence> batch = {
        {first, firstPositions, firstPages.blockIds, firstPages.validTokens,
         LogitsRequest::All}};
    if (both)
      batch.push_back({second, secondPositions, secondPages.blockIds,
                       secondPages.validTokens, LogitsRequest::Last});
    ASSERT_FALSE(bool(cpu->forward(batch, out)));
  };
  ForwardOutput int8Rows, int8Batch, f32Rows;
  run(model, false, int8Rows);
  run(model, true, int8Batch);
  run(**f32, false, f32Rows);
  const int64_t vocab = model.config().vocabSize;
  ASSERT_EQ(int8Rows.logits.size(), size_t(48 * vocab));
  EXPECT_EQ(std::memcmp(int8Rows.logits.data(), int8Batch.logits.data(),
                        int8Rows.logits.size() * sizeof(float)),
            0);
  // Per row: the mean absolute difference over the vocabulary, and the
  // greedy token (a near tie may flip).
  double worstMean = 0;
  int sameTop = 0;
  for (int64_t row = 0; row < 48; ++row) {
    const float *a = int8Rows.logits.data() + row * vocab;
    const float *b = f32Rows.logits.data() + row * vocab;
    double sum = 0;
    for (int64_t index = 0; index < vocab; ++index)
      sum += std::abs(a[index] - b[index]);
    worstMean = std::max(worstMean, sum / double(vocab));
    sameTop += std::max_element(a, a + vocab) - a ==
               std::max_element(b, b + vocab) - b;
  }
  std::printf("int8 prompt rows against f32 GEMMs, 48 rows: largest mean "
              "|difference| %.3g, %d greedy tokens the same\n",
              worstMean, sameTop);
  // Measured on these random-token rows: 0.48 / 0.60 (AVX-512 / AVX2),
  // 44-45 the same; bf16 GEMMs against f32 0.11, 46. A row multiplied
  // wrongly moves its logits by their whole scale (~10).
  EXPECT_LT(worstMean, 1.0);
  EXPECT_GE(sameTop, 40);
}

// The last layer carries only the rows whose logits the step returns past
// its K/V write (runtime/backend/cpu/ForwardPass.cpp, keepLogitRows): on
// the default numerics, with K stored rotated and rope-in-kernel, every
// logit, key-mass sum and K/V element keeps the bits of the pass that
// carries all rows. The step mixes decode rows asking for logits and for
// none, prompts asking for the last row's logits (with a key-mass probe
// over the last two layers), for every row's and for none, and a
// request's rows placed by queryIndices; a decode step then reads
// everything written, and a pass of two layers (which carries no row past
// its second K/V write) writes more.
TEST(Forward, TheLastLayerKeepsOnlyLogitRowsWithTheSameBits) {
  Model *loaded = defaultModel();
  if (!loaded)
    GTEST_SKIP() << "model not found at " << modelPath();
  Model &model = *loaded;
  const uint32_t layers = model.config().numLayers;
  for (bool keysRotated : {true, false}) {
    std::unique_ptr<backend::CpuBackend> pruned =
        makeStorage(model, keysRotated);
    std::unique_ptr<backend::CpuBackend> whole =
        makeStorage(model, keysRotated);
    whole->pass().enableLastLayerPruning(false);
    pruned->setProfiling(true);
    const std::vector<int32_t> decodeTokens = someTokens(21, 1),
                               lastTokens = someTokens(37, 2),
                               allTokens = someTokens(19, 3),
                               noneTokens = someTokens(26, 4),
                               placedTokens = someTokens(48, 5);
    // Sequences 0 and 1 decode their 21st token after a 20-token prompt
    // (the same tokens; sequence 1 asks for no logits).
    Pages decodePages(0, 21), silentPages(40, 21), lastPages(8, 37),
        allPages(16, 19), nonePages(24, 26), placedPages(32, 48);
    const std::vector<int32_t> decodePositions = iota(0, 21),
                               lastPositions = iota(0, 37),
                               allPositions = iota(0, 19),
                               nonePositions = iota(0, 26),
                               placedPositions = iota(0, 48);
    for (int32_t firstBlock : {0, 40}) {
      Pages prefixPages(firstBlock, 20);
      ForwardSequence prefix{llvm::ArrayRef(decodeTokens).take_front(20),
                             llvm::ArrayRef(decodePositions).take_front(20),
                             prefixPages.blockIds, prefixPages.validTokens,
                             LogitsRequest::None};
      ASSERT_FALSE(bool(pruned->forwardLayers(prefix, layers)));
      ASSERT_FALSE(bool(whole->forwardLayers(prefix, layers)));
    }
    // The placed sequence: its first 40 tokens written, then the rows at
    // 13-15, 30-31 and 40-47 recomputed in one sequence (a span hit's end
    // blocks and tail).
    Pages placedPrefixPages(32, 40);
    ForwardSequence placedPrefix{llvm::ArrayRef(placedTokens).take_front(40),
                                 llvm::ArrayRef(placedPositions).take_front(40),
                                 placedPrefixPages.blockIds,
                                 placedPrefixPages.validTokens,
                                 LogitsRequest::None};
    ASSERT_FALSE(bool(pruned->forwardLayers(placedPrefix, layers)));
    ASSERT_FALSE(bool(whole->forwardLayers(placedPrefix, layers)));
    std::vector<int32_t> placedIndices = {13, 14, 15, 30, 31};
    for (int32_t index = 40; index < 48; ++index)
      placedIndices.push_back(index);
    std::vector<int32_t> placedRows, placedRowPositions;
    for (int32_t index : placedIndices) {
      placedRows.push_back(placedTokens[size_t(index)]);
      placedRowPositions.push_back(index);
    }

    auto run = [&](backend::CpuBackend &backend, std::vector<float> &mass,
                   ForwardOutput &output) {
      mass.assign(37, 0.0f);
      std::vector<ForwardSequence> batch;
      batch.push_back({llvm::ArrayRef(decodeTokens).take_back(1),
                       llvm::ArrayRef(decodePositions).take_back(1),
                       decodePages.blockIds, decodePages.validTokens,
                       LogitsRequest::Last});
      batch.push_back({llvm::ArrayRef(decodeTokens).take_back(1),
                       llvm::ArrayRef(decodePositions).take_back(1),
                       silentPages.blockIds, silentPages.validTokens,
                       LogitsRequest::None});
      ForwardSequence probed{lastTokens, lastPositions, lastPages.blockIds,
                             lastPages.validTokens, LogitsRequest::Last};
      probed.keyMass = mass;
      probed.massFirstLayer = layers - 2;
      probed.massEndLayer = layers;
      batch.push_back(probed);
      batch.push_back({allTokens, allPositions, allPages.blockIds,
                       allPages.validTokens, LogitsRequest::All});
      batch.push_back({noneTokens, nonePositions, nonePages.blockIds,
                       nonePages.validTokens, LogitsRequest::None});
      ForwardSequence placed{placedRows, placedRowPositions,
                             placedPages.blockIds, placedPages.validTokens,
                             LogitsRequest::Last};
      placed.queryIndices = placedIndices;
      batch.push_back(placed);
      return backend.forward(batch, output);
    };
    std::vector<float> prunedMass, wholeMass;
    ForwardOutput prunedOutput, wholeOutput;
    for (auto [backend, mass, output] :
         {std::tuple(pruned.get(), &prunedMass, &prunedOutput),
          std::tuple(whole.get(), &wholeMass, &wholeOutput)})
      if (llvm::Error error = run(*backend, *mass, *output))
        FAIL() << llvm::toString(std::move(error));
    ASSERT_EQ(prunedOutput.rowOffsets, wholeOutput.rowOffsets);
    ASSERT_EQ(prunedOutput.logits.size(),
              size_t(1 + 0 + 1 + 19 + 0 + 1) * model.config().vocabSize);
    EXPECT_EQ(std::memcmp(prunedOutput.logits.data(), wholeOutput.logits.data(),
                          prunedOutput.logits.size() * sizeof(float)),
              0)
        << "keys rotated " << keysRotated;
    EXPECT_EQ(std::memcmp(prunedMass.data(), wholeMass.data(),
                          prunedMass.size() * sizeof(float)),
              0)
        << "keys rotated " << keysRotated;
    // The prefixes' last layers carried no row; of that step's 1 + 1 + 37
    // + 19 + 26 + 13 rows, 22 carried on.
    EXPECT_EQ(pruned->profile().kvOnlyRows, (20 + 20 + 40) + (97 - 22));
    // Their query-key pairs (a row at logical index i sees i + 1 keys):
    // the prefixes' 20 + 20 + 40 rows; the silent decode row (index 20),
    // 36 of the probed prompt's, all 26 of the one without logits and the
    // placed rows but the last (13-15, 30-31, 40-46).
    EXPECT_EQ(pruned->profile().kvOnlyPairs,
              (210 + 210 + 820) + 21 + 666 + 351 +
                  (14 + 15 + 16 + 31 + 32 + 41 + 42 + 43 + 44 + 45 + 46 + 47));

    // One decode step of every sequence, rewriting its last token: it
    // reads every K/V the steps wrote.
    auto decode = [&](backend::CpuBackend &backend, ForwardOutput &output) {
      std::vector<ForwardSequence> batch;
      for (const Pages *pages : {&decodePages, &silentPages, &lastPages,
                                 &allPages, &nonePages, &placedPages}) {
        const size_t length = pages->blockIds.size() * 16 -
                              size_t(16 - pages->validTokens.back());
        batch.push_back({llvm::ArrayRef(placedTokens).take_front(1),
                         llvm::ArrayRef(placedPositions).slice(length - 1, 1),
                         pages->blockIds, pages->validTokens,
                         LogitsRequest::Last});
      }
      return backend.forward(batch, output);
    };
    ASSERT_FALSE(bool(decode(*pruned, prunedOutput)));
    ASSERT_FALSE(bool(decode(*whole, wholeOutput)));
    EXPECT_EQ(std::memcmp(prunedOutput.logits.data(), wholeOutput.logits.data(),
                          prunedOutput.logits.size() * sizeof(float)),
              0)
        << "keys rotated " << keysRotated << ", decoding after";

    // A pass of two layers (a repair's selection pass) carries no row past
    // its second layer's K/V write; every K/V written so far is the same.
    Pages longerPages(24, 27);
    const std::vector<int32_t> longerTokens = someTokens(27, 4),
                               longerPositions = iota(0, 27);
    ForwardSequence twoLayers{llvm::ArrayRef(longerTokens).take_back(1),
                              llvm::ArrayRef(longerPositions).take_back(1),
                              longerPages.blockIds, longerPages.validTokens,
                              LogitsRequest::None};
    ASSERT_FALSE(bool(pruned->forwardLayers(twoLayers, 2)));
    ASSERT_FALSE(bool(whole->forwardLayers(twoLayers, 2)));
    const backend::KvStorage &a = *pruned->hostStorage(),
                             &b = *whole->hostStorage();
    int64_t differing = 0;
    for (int layer = 0; layer < int(layers); ++layer)
      for (int64_t block = 0; block < 42; ++block)
        for (int head = 0; head < int(model.config().numKvHeads); ++head)
          for (int slot = 0; slot < 16; ++slot)
            for (int dim = 0; dim < int(model.config().headDim); ++dim)
              differing += a.key(layer, block, head, slot, dim) !=
                               b.key(layer, block, head, slot, dim) ||
                           a.value(layer, block, head, slot, dim) !=
                               b.value(layer, block, head, slot, dim);
    EXPECT_EQ(differing, 0) << "keys rotated " << keysRotated;
  }
}

TEST(Forward, BadBatchesAreErrorsNotCrashes) {
  REQUIRE_MODEL();
  auto storage = makeStorage(*model);
  std::vector<int32_t> tokens = {1, 2, 3}, positions = iota(0, 3);
  std::vector<int32_t> blocks = {0}, valid = {2};
  ForwardOutput output;
  llvm::Error tooShort = storage->forward(
      ForwardSequence{tokens, positions, blocks, valid}, output);
  ASSERT_TRUE(bool(tooShort));
  EXPECT_NE(llvm::toString(std::move(tooShort)).find("fewer than the 3 new"),
            std::string::npos);
  std::vector<int32_t> badTokens = {1, 99999, 3};
  valid = {3};
  llvm::Error badId = storage->forward(
      ForwardSequence{badTokens, positions, blocks, valid}, output);
  ASSERT_TRUE(bool(badId));
  EXPECT_NE(llvm::toString(std::move(badId)).find("id 99999"),
            std::string::npos);
  std::vector<int32_t> badBlocks = {100000};
  llvm::Error badBlock = storage->forward(
      ForwardSequence{tokens, positions, badBlocks, valid}, output);
  ASSERT_TRUE(bool(badBlock));
  EXPECT_NE(llvm::toString(std::move(badBlock)).find("block id 100000"),
            std::string::npos);
}

} // namespace
