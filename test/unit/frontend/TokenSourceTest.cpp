//===- TokenSourceTest.cpp - The hand-written lexer matches Span.g4's -----===//
//
// Differential test: the token types and texts of frontend's SpanTokenSource
// must equal those of the ANTLR-generated lexer for the same input, on the
// lit programs, on edge cases, and on many random strings over the
// characters that matter to the lexer.
//
//===----------------------------------------------------------------------===//

#include "frontend/SpanTokenSource.h"

#include "grammar/SpanLexer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

using namespace spanc;

namespace {

using TokenList = std::vector<std::pair<size_t, std::string>>;

TokenList lexWithAntlr(const std::string &text) {
  antlr4::ANTLRInputStream input(text);
  grammar::SpanLexer lexer(&input);
  lexer.removeErrorListeners();
  TokenList tokens;
  for (;;) {
    std::unique_ptr<antlr4::Token> token = lexer.nextToken();
    if (token->getType() == antlr4::Token::EOF)
      break;
    tokens.emplace_back(token->getType(), token->getText());
  }
  return tokens;
}

TokenList lexByHand(const std::string &text) {
  antlr4::ANTLRInputStream empty("");
  grammar::SpanLexer vocabularySource(&empty);
  frontend::SpanTokenSource source(text, &empty,
                                   vocabularySource.getVocabulary());
  TokenList tokens;
  for (;;) {
    std::unique_ptr<antlr4::Token> token = source.nextToken();
    if (token->getType() == antlr4::Token::EOF)
      break;
    tokens.emplace_back(token->getType(), token->getText());
  }
  return tokens;
}

std::string describe(const TokenList &tokens) {
  std::string text;
  for (const auto &[type, spelling] : tokens)
    text += std::to_string(type) + ":" + spelling + " ";
  return text;
}

void expectSameTokens(const std::string &text) {
  TokenList expected = lexWithAntlr(text);
  TokenList actual = lexByHand(text);
  EXPECT_EQ(describe(actual), describe(expected)) << "input: " << text;
}

} // namespace

TEST(SpanTokenSource, MatchesTheGeneratedLexerOnEdgeCases) {
  for (const char *text : {
           "",
           "query q { gen(max_tokens = 128, temperature = 0.0) { user x } }",
           "param p = -1 param f = -1.5e3 param g = .5 param h = 1. "
           "param i = 1e5 param j = 1e param k = - param l = -.5E-2",
           "\"a\\\"b\" \"\\u00e9\" \"bad\\q\" \"unterminated\n\"\"",
           "\"\"\"multi\nline \" \"\"\" \"\"\"never closed",
           "\"\"\"\"\"\" \"\"\"a\"\"\"\"",
           "# comment only",
           "x # comment\n y\r\n\tz",
           "@ $ % ^ & * ; : ' ` ~ ! ? < > [ ] | \\ /",
           "é ü 日本 \"日本\" _a1 a_1 1a querying query_ gen2",
           "retrieve(corpus = \"c\", query = q, k = 3)",
           "{{{ }}} (( ))",
       })
    expectSameTokens(text);
}

TEST(SpanTokenSource, MatchesTheGeneratedLexerOnTheLitPrograms) {
  const char *srcdir = std::getenv("TEST_SRCDIR");
  const char *workspace = std::getenv("TEST_WORKSPACE");
  ASSERT_TRUE(srcdir && workspace) << "run under bazel test";
  llvm::SmallString<256> root(srcdir);
  llvm::sys::path::append(root, workspace, "test", "lit");
  unsigned count = 0;
  std::error_code error;
  for (llvm::sys::fs::recursive_directory_iterator it(root, error), end;
       it != end && !error; it.increment(error)) {
    if (llvm::sys::path::extension(it->path()) != ".span")
      continue;
    auto buffer = llvm::MemoryBuffer::getFile(it->path());
    ASSERT_TRUE(bool(buffer)) << it->path();
    SCOPED_TRACE(it->path());
    expectSameTokens((*buffer)->getBuffer().str());
    ++count;
  }
  EXPECT_GE(count, 10u);
}

TEST(SpanTokenSource, MatchesTheGeneratedLexerOnRandomInput) {
  // Characters on which the lexer rules turn, so that short random strings
  // hit every rule and their boundaries.
  const std::string alphabet = "\"\\\\\\nqu0-1.eE+_ #{}()=,x\t\r";
  std::mt19937 random(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    size_t length = random() % 24;
    for (size_t j = 0; j < length; ++j)
      text += alphabet[random() % alphabet.size()];
    expectSameTokens(text);
    if (::testing::Test::HasFailure())
      break;
  }
}
