//===- StepLayoutTest.cpp - A forward step, flattened and packed ----------===//

#include "runtime/backend/StepLayout.h"
#include "runtime/backend/CudaStepLayout.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using spanc::backend::buildStepLayout;
using spanc::backend::CudaStepArrays;
using spanc::backend::StepLayout;
using spanc::backend::StepLimits;
using spanc::model::ForwardSequence;
using spanc::model::LogitsRequest;
using spanc::model::RowKind;

StepLimits limits(bool ropeInKernel = true) {
  StepLimits result;
  result.numBlocks = 16;
  result.blockSize = 4;
  result.vocabSize = 100;
  result.numPositions = 64;
  result.ropeInKernel = ropeInKernel;
  return result;
}

std::vector<int32_t> slice(const CudaStepArrays &arrays, int64_t offset,
                           size_t count) {
  return std::vector<int32_t>(arrays.packed.begin() + offset,
                              arrays.packed.begin() + offset + int64_t(count));
}

TEST(StepLayout, NewTokensTakeTheLastSlotsSkippingPartialBlockPadding) {
  // A span page list: block 3 holds 2 tokens (2 slots of padding), block 7
  // holds 4, block 9 the 3 new tokens' 3 slots. Logical indices run 0..8,
  // the padding takes none.
  std::vector<int32_t> tokens = {5, 6, 7}, blocks = {3, 7, 9},
                       valid = {2, 4, 3};
  ForwardSequence sequence;
  sequence.tokens = tokens;
  sequence.blockIds = blocks;
  sequence.validTokens = valid;
  sequence.logits = LogitsRequest::Last;
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({sequence}, limits(), layout)));
  EXPECT_EQ(layout.slotBlocks, (std::vector<int32_t>{9, 9, 9}));
  EXPECT_EQ(layout.slotIndices, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(layout.positions, (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(layout.contextLengths, (std::vector<int32_t>{9}));
  EXPECT_EQ(layout.logitTokens, (std::vector<int32_t>{2}));
  EXPECT_EQ(layout.maxContextLength, 9);
}

/// Two runs of one request in one sequence: a recomputed block (logical
/// 2..3, block 7) and the tail (6..8, block 9), over the tail's page list.
struct TwoRuns {
  std::vector<int32_t> tokens = {5, 6, 7, 8, 9}, blocks = {3, 7, 4, 9},
                       valid = {2, 2, 2, 3}, indices = {2, 3, 6, 7, 8};
  /// The sequence over these vectors (valid while this object is).
  ForwardSequence sequence() const {
    ForwardSequence result;
    result.tokens = tokens;
    result.blockIds = blocks;
    result.validTokens = valid;
    result.queryIndices = indices;
    return result;
  }
};

TEST(StepLayout, QueryIndicesPlaceEachTokenAtItsLogicalIndex) {
  // Each token's slot and RoPE position follow its own index.
  const TwoRuns runs;
  const std::vector<int32_t> &indices = runs.indices;
  ForwardSequence sequence = runs.sequence();
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({sequence}, limits(), layout)));
  EXPECT_TRUE(layout.anyQueryIndices);
  EXPECT_EQ(layout.queryIndices, indices);
  EXPECT_EQ(layout.slotBlocks, (std::vector<int32_t>{7, 7, 9, 9, 9}));
  EXPECT_EQ(layout.slotIndices, (std::vector<int32_t>{0, 1, 0, 1, 2}));
  EXPECT_EQ(layout.positions, indices);
  EXPECT_EQ(layout.logitTokens, (std::vector<int32_t>{4}));
  // Indices must increase inside the page list.
  std::vector<int32_t> unordered = {2, 3, 3, 7, 8};
  sequence.queryIndices = unordered;
  llvm::Error repeated = buildStepLayout({sequence}, limits(), layout);
  EXPECT_TRUE(bool(repeated));
  llvm::consumeError(std::move(repeated));
  std::vector<int32_t> outside = {2, 3, 6, 7, 9};
  sequence.queryIndices = outside;
  llvm::Error error = buildStepLayout({sequence}, limits(), layout);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("query index 9"),
            std::string::npos);
}

TEST(StepLayout, NewTokensMayStartInsideAPartiallyFilledBlock) {
  // Decode after a prompt of 6 tokens in blocks of 4: the new token is
  // slot 2 of the second block (pages report it as valid already).
  std::vector<int32_t> tokens = {42}, blocks = {1, 2}, valid = {4, 3};
  ForwardSequence sequence;
  sequence.tokens = tokens;
  sequence.blockIds = blocks;
  sequence.validTokens = valid;
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({sequence}, limits(), layout)));
  EXPECT_EQ(layout.slotBlocks, (std::vector<int32_t>{2}));
  EXPECT_EQ(layout.slotIndices, (std::vector<int32_t>{2}));
  EXPECT_EQ(layout.positions, (std::vector<int32_t>{6}));
}

TEST(StepLayout, RotatedKeysKeepTheSequencesOwnPositions) {
  std::vector<int32_t> tokens = {1, 2}, positions = {40, 41}, blocks = {0},
                       valid = {2};
  ForwardSequence sequence;
  sequence.tokens = tokens;
  sequence.positions = positions;
  sequence.blockIds = blocks;
  sequence.validTokens = valid;
  StepLayout layout;
  ASSERT_FALSE(bool(
      buildStepLayout({sequence}, limits(/*ropeInKernel=*/false), layout)));
  EXPECT_EQ(layout.positions, (std::vector<int32_t>{40, 41}));
}

TEST(StepLayout, SequencesAreFlattenedWithOffsetsAndLogitRows) {
  std::vector<int32_t> decodeToken = {3}, decodeBlocks = {4}, decodeValid = {1};
  std::vector<int32_t> promptTokens = {1, 2, 3, 4, 5}, promptBlocks = {5, 6},
                       promptValid = {4, 1};
  std::vector<int32_t> silentTokens = {8, 9}, silentBlocks = {10},
                       silentValid = {2};
  ForwardSequence decode, prompt, silent;
  decode.tokens = decodeToken;
  decode.blockIds = decodeBlocks;
  decode.validTokens = decodeValid;
  decode.rows = RowKind::Decode;
  prompt.tokens = promptTokens;
  prompt.blockIds = promptBlocks;
  prompt.validTokens = promptValid;
  prompt.logits = LogitsRequest::All;
  silent.tokens = silentTokens;
  silent.blockIds = silentBlocks;
  silent.validTokens = silentValid;
  silent.logits = LogitsRequest::None;
  StepLayout layout;
  ASSERT_FALSE(
      bool(buildStepLayout({decode, prompt, silent}, limits(), layout)));
  EXPECT_EQ(layout.queryOffsets, (std::vector<int32_t>{0, 1, 6, 8}));
  EXPECT_EQ(layout.pageOffsets, (std::vector<int32_t>{0, 1, 3, 4}));
  EXPECT_EQ(layout.blockIds, (std::vector<int32_t>{4, 5, 6, 10}));
  EXPECT_EQ(layout.logitTokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(
      std::vector<int64_t>(layout.rowOffsets.begin(), layout.rowOffsets.end()),
      (std::vector<int64_t>{0, 1, 6, 6}));
  EXPECT_EQ(layout.maxQueryLength, 5);
  EXPECT_EQ(layout.decodeSequences, (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(layout.numDecodeRows, 1);
  EXPECT_TRUE(layout.anyAllLogits);
  // The CUDA backend's one upload holds every array at an aligned offset.
  CudaStepArrays arrays;
  spanc::backend::packCudaStep(layout, arrays);
  const auto &offsets = arrays.offsets;
  for (int64_t offset :
       {offsets.tokenIds, offsets.positions, offsets.slotBlocks,
        offsets.slotIndices, offsets.queryOffsets, offsets.pageOffsets,
        offsets.blockIds, offsets.validTokens, offsets.contextLengths,
        offsets.logitTokens})
    EXPECT_EQ(offset % CudaStepArrays::kPackAlignment, 0);
  EXPECT_EQ(slice(arrays, offsets.tokenIds, 8), layout.tokenIds);
  EXPECT_EQ(slice(arrays, offsets.slotBlocks, 8), layout.slotBlocks);
  EXPECT_EQ(slice(arrays, offsets.blockIds, 4), layout.blockIds);
  EXPECT_EQ(slice(arrays, offsets.logitTokens, 6), layout.logitTokens);
  EXPECT_EQ(slice(arrays, offsets.queryOffsets, 4), layout.queryOffsets);
}

TEST(StepLayout, ReusingALayoutForgetsTheLastStep) {
  std::vector<int32_t> tokens = {1, 2, 3}, blocks = {0}, valid = {3};
  ForwardSequence sequence;
  sequence.tokens = tokens;
  sequence.blockIds = blocks;
  sequence.validTokens = valid;
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({sequence, sequence}, limits(), layout)));
  ASSERT_FALSE(bool(buildStepLayout({sequence}, limits(), layout)));
  EXPECT_EQ(layout.numTokens(), 3);
  EXPECT_EQ(layout.numSequences(), 1);
  EXPECT_EQ(layout.numPages(), 1);
}

/// The message of a step that must fail.
std::string failure(llvm::ArrayRef<ForwardSequence> batch,
                    const StepLimits &stepLimits = limits()) {
  StepLayout layout;
  llvm::Error error = buildStepLayout(batch, stepLimits, layout);
  return error ? llvm::toString(std::move(error)) : "";
}

TEST(StepLayout, MalformedSequencesFailNamingTheSequence) {
  std::vector<int32_t> tokens = {1, 2}, blocks = {0}, valid = {2};
  ForwardSequence good;
  good.tokens = tokens;
  good.blockIds = blocks;
  good.validTokens = valid;

  ForwardSequence outside = good;
  std::vector<int32_t> farBlock = {16};
  outside.blockIds = farBlock;
  EXPECT_EQ(failure({good, outside}),
            "forward: sequence 1: block id 16 outside the storage's 16 blocks");

  ForwardSequence short_ = good;
  std::vector<int32_t> one = {1};
  short_.validTokens = one;
  EXPECT_EQ(failure({short_}), "forward: sequence 0: page list holds 1 "
                               "tokens, fewer than the 2 new ones");

  ForwardSequence badToken = good;
  std::vector<int32_t> bigIds = {1, 100};
  badToken.tokens = bigIds;
  EXPECT_EQ(failure({badToken}),
            "forward: sequence 0: token 1 has id 100, vocabulary is 100");

  ForwardSequence overfull = good;
  std::vector<int32_t> five = {5};
  overfull.validTokens = five;
  EXPECT_EQ(failure({overfull}),
            "forward: sequence 0: page 0 has 5 valid tokens (block size 4)");

  std::vector<int32_t> decodeToken = {1};
  ForwardSequence decode = good;
  decode.tokens = decodeToken;
  EXPECT_EQ(failure({good, decode}),
            "forward: sequence 1: a decode sequence after a prompt sequence "
            "(decode sequences come first)");
}

TEST(StepLayout, TheCudaBackendRefusesSpanScalingWithAClearError) {
  std::vector<int32_t> tokens = {1}, blocks = {0, 1}, valid = {4, 1};
  std::vector<uint8_t> spanPages = {1, 0};
  ForwardSequence sequence;
  sequence.tokens = tokens;
  sequence.blockIds = blocks;
  sequence.validTokens = valid;
  sequence.spanPages = spanPages;
  sequence.spanScaling.temperature = 2;
  const StepLimits cuda = spanc::backend::withCudaRefusals(limits());
  EXPECT_NE(
      failure({sequence}, cuda).find("not implemented by the CUDA backend"),
      std::string::npos);
  // The CPU scales spans; identity scaling is the plain kernel everywhere.
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({sequence}, limits(), layout)));
  EXPECT_TRUE(layout.anySpanScaling);
  EXPECT_EQ(layout.spanPages, (std::vector<uint8_t>{1, 0}));
  sequence.spanScaling.temperature = 1;
  EXPECT_EQ(failure({sequence}, cuda), "");
}

TEST(StepLayout, AttentionPairsCountTheKeysEachNewTokenSees) {
  // A decode token over a 9-token page list (9 pairs) beside a fresh
  // 3-token prompt (1 + 2 + 3).
  std::vector<int32_t> promptTokens = {5, 6, 7}, promptBlocks = {1},
                       promptValid = {3};
  ForwardSequence prompt;
  prompt.tokens = promptTokens;
  prompt.blockIds = promptBlocks;
  prompt.validTokens = promptValid;
  std::vector<int32_t> decodeTokens = {8}, decodeBlocks = {3, 7, 9},
                       decodeValid = {2, 4, 3};
  ForwardSequence decode;
  decode.tokens = decodeTokens;
  decode.blockIds = decodeBlocks;
  decode.validTokens = decodeValid;
  ASSERT_EQ(failure({decode, prompt}), "");
  StepLayout layout;
  ASSERT_FALSE(bool(buildStepLayout({decode, prompt}, limits(), layout)));
  EXPECT_EQ(layout.attentionPairs(), 9 + 6);
  // Runs at their logical indices 2, 3, 6, 7, 8 of one page list: 3 + 4 +
  // 7 + 8 + 9; beside them the prompt's rows still count 1 + 2 + 3.
  const TwoRuns twoRuns;
  const ForwardSequence runs = twoRuns.sequence();
  ASSERT_FALSE(bool(buildStepLayout({runs}, limits(), layout)));
  EXPECT_EQ(layout.attentionPairs(), 31);
  ASSERT_FALSE(bool(buildStepLayout({runs, prompt}, limits(), layout)));
  EXPECT_EQ(layout.attentionPairs(), 31 + 6);
}

} // namespace
