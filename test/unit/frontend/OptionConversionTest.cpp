//===- OptionConversionTest.cpp - A written option as its op's attribute --===//

#include "frontend/OptionConversion.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>

using namespace spanc;

namespace {

const ir::AttrSpec &genOption(llvm::StringRef name) {
  return *ir::getOpInfo(ir::OpKind::Gen).findAttribute(name);
}

std::string problem(const ir::AttrSpec &spec, ir::Attribute value) {
  llvm::Expected<ir::Attribute> converted =
      frontend::convertOption(spec, std::move(value));
  return converted ? "" : llvm::toString(converted.takeError());
}

TEST(OptionConversion, AnIntegerGivenForAFloatOptionBecomesAFloat) {
  llvm::Expected<ir::Attribute> temperature =
      frontend::convertOption(genOption("temperature"), ir::Attribute(1));
  ASSERT_TRUE(bool(temperature)) << llvm::toString(temperature.takeError());
  EXPECT_EQ(*temperature, ir::Attribute(1.0));
  llvm::Expected<ir::Attribute> tokens =
      frontend::convertOption(genOption("max_tokens"), ir::Attribute(7));
  ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
  EXPECT_EQ(*tokens, ir::Attribute(int64_t(7)));
}

TEST(OptionConversion, RefusesWhatTheVerifierRefusesInItsWords) {
  struct Case {
    const char *option;
    ir::Attribute value;
    const char *message;
  };
  const Case cases[] = {
      {"temperature", ir::Attribute(2.5), "must be in [0, 2], got 2.5"},
      {"temperature", ir::Attribute("hot"), "takes a number, not a string"},
      {"max_tokens", ir::Attribute(-1), "must not be negative, got -1"},
      {"max_tokens", ir::Attribute(1.5), "takes an integer, not a float"},
      {"reduce", ir::Attribute(1), "must be at least 2, got 1"},
      {"top_k", ir::Attribute(int64_t(5000000000)),
       "is out of range: must be at most 1000000000, got 5000000000"},
      {"model", ir::Attribute(3), "takes a string, not an integer"},
  };
  for (const Case &test : cases) {
    const ir::AttrSpec &spec = genOption(test.option);
    EXPECT_EQ(problem(spec, test.value), test.message) << test.option;
    // One rule: the verifier says the same of the attribute on an op.
    EXPECT_EQ(ir::checkAttribute(spec, test.value), test.message)
        << test.option;
  }
}

} // namespace
