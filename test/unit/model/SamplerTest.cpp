//===- SamplerTest.cpp - Greedy, temperature, top-k, top-p, seeds ---------===//

#include "runtime/model/Sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace {

using namespace spanc::model;

TEST(Sampler, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  Sampler sampler(SamplingParams{});
  EXPECT_EQ(sampler.sample(logits), 1);
  EXPECT_EQ(Sampler::argmax(logits), 1);
  SamplingParams topOne;
  topOne.temperature = 1.0f;
  topOne.topK = 1;
  EXPECT_EQ(Sampler(topOne).sample(logits), 1);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 7;
  Sampler sampler(params);
  std::map<int, int> counts;
  const int draws = 20000;
  for (int draw = 0; draw < draws; ++draw)
    ++counts[sampler.sample(logits)];
  EXPECT_NEAR(counts[0] / double(draws), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(draws), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(draws), 0.2, 0.02);
  // A low temperature sharpens: 0.5^(1/0.25) vs 0.3^4 vs 0.2^4.
  params.temperature = 0.25f;
  Sampler sharp(params);
  int first = 0;
  for (int draw = 0; draw < draws; ++draw)
    first += sharp.sample(logits) == 0;
  double expected = std::pow(0.5, 4) /
                    (std::pow(0.5, 4) + std::pow(0.3, 4) + std::pow(0.2, 4));
  EXPECT_NEAR(first / double(draws), expected, 0.02);
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                               std::log(0.1f)};
  SamplingParams topK;
  topK.temperature = 1.0f;
  topK.topK = 2;
  topK.seed = 3;
  Sampler samplerK(topK);
  std::map<int, int> countsK;
  for (int draw = 0; draw < 5000; ++draw)
    ++countsK[samplerK.sample(logits)];
  EXPECT_EQ(countsK.size(), 2u);
  EXPECT_NEAR(countsK[0] / 5000.0, 0.4 / 0.7, 0.03);

  SamplingParams topP;
  topP.temperature = 1.0f;
  topP.topP = 0.75f; // 0.4 + 0.3 < 0.75 <= 0.4 + 0.3 + 0.2
  topP.seed = 4;
  Sampler samplerP(topP);
  std::map<int, int> countsP;
  for (int draw = 0; draw < 5000; ++draw)
    ++countsP[samplerP.sample(logits)];
  EXPECT_EQ(countsP.size(), 3u);
  EXPECT_EQ(countsP.count(3), 0u);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(1000);
  for (size_t index = 0; index < logits.size(); ++index)
    logits[index] = float(std::sin(double(index)));
  SamplingParams params;
  params.temperature = 0.9f;
  params.topK = 50;
  params.topP = 0.95f;
  params.seed = 1234;
  auto run = [&](uint64_t seed) {
    SamplingParams copy = params;
    copy.seed = seed;
    Sampler sampler(copy);
    std::vector<int32_t> tokens;
    for (int step = 0; step < 64; ++step)
      tokens.push_back(sampler.sample(logits));
    return tokens;
  };
  EXPECT_EQ(run(1234), run(1234));
  EXPECT_NE(run(1234), run(1235));
}

} // namespace
