//===- ModelNamesTest.cpp - The names of the one model served -------------===//
//
// --served-model-name as vLLM takes it (repeatable, comma or space
// separated, the first the primary) and the matching rule of
// server/ModelNames.h: any case, with or without ".gguf", nothing looser.
//
//===----------------------------------------------------------------------===//

#include "server/ModelNames.h"

#include <gtest/gtest.h>

namespace spanc::server {
namespace {

std::vector<std::string> names(const ModelNames &models) {
  return {models.all().begin(), models.all().end()};
}

TEST(ModelNames, WithoutTheFlagTheFilesStemIsTheOneName) {
  auto models = ModelNames::fromFlags({}, "SmolLM2-135M-Instruct.Q4_1");
  ASSERT_TRUE(bool(models)) << llvm::toString(models.takeError());
  EXPECT_EQ(names(*models),
            std::vector<std::string>{"SmolLM2-135M-Instruct.Q4_1"});
  EXPECT_EQ(models->primary(), "SmolLM2-135M-Instruct.Q4_1");
}

TEST(ModelNames, FlagsRepeatAndSplitOnCommasInOrder) {
  // vLLM's "--served-model-name a b" arrives as two occurrences.
  auto models = ModelNames::fromFlags({"smol, HuggingFaceTB/SmolLM2", "b"},
                                      "ignored-stem");
  ASSERT_TRUE(bool(models)) << llvm::toString(models.takeError());
  EXPECT_EQ(names(*models),
            (std::vector<std::string>{"smol", "HuggingFaceTB/SmolLM2", "b"}));
  EXPECT_EQ(models->primary(), "smol");
  EXPECT_EQ(models->describe(), "'smol', 'HuggingFaceTB/SmolLM2', 'b'");
}

TEST(ModelNames, AnEmptyNameIsAnError) {
  for (const char *flag : {"", "a,,b", "a, "}) {
    auto models = ModelNames::fromFlags({flag}, "stem");
    ASSERT_FALSE(bool(models)) << flag;
    EXPECT_NE(llvm::toString(models.takeError()).find("a name is empty"),
              std::string::npos);
  }
}

TEST(ModelNames, SpellingsOfOneNameAreListedOnce) {
  ModelNames models({"smol", "SMOL", "smol.gguf", "other"});
  EXPECT_EQ(names(models), (std::vector<std::string>{"smol", "other"}));
}

TEST(ModelNames, MatchesInAnyCaseWithOrWithoutGguf) {
  ModelNames models({"SmolLM2-135M-Instruct.Q4_1", "smol"});
  for (const char *requested :
       {"SmolLM2-135M-Instruct.Q4_1", "smollm2-135m-instruct.q4_1",
        "SmolLM2-135M-Instruct.Q4_1.gguf", "SMOLLM2-135M-INSTRUCT.Q4_1.GGUF"}) {
    const std::string *served = models.match(requested);
    ASSERT_NE(served, nullptr) << requested;
    EXPECT_EQ(*served, "SmolLM2-135M-Instruct.Q4_1");
  }
  ASSERT_NE(models.match("Smol.gguf"), nullptr);
  EXPECT_EQ(*models.match("Smol.gguf"), "smol");
}

TEST(ModelNames, NothingLooserMatches) {
  ModelNames models({"SmolLM2-135M-Instruct.Q4_1"});
  for (const char *requested :
       {"SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf.gguf",
        "HuggingFaceTB/SmolLM2-135M-Instruct.Q4_1",
        " SmolLM2-135M-Instruct.Q4_1", "", "SmolLM2-135M-Instruct.Q4_1.bin"})
    EXPECT_EQ(models.match(requested), nullptr) << requested;
}

TEST(ModelNames, NoNamesTakeAnyModel) {
  ModelNames models;
  ASSERT_NE(models.match("anything"), nullptr);
  EXPECT_EQ(*models.match("anything"), "anything");
  EXPECT_EQ(models.primary(), "");
}

} // namespace
} // namespace spanc::server
