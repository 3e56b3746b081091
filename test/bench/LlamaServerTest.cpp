//===- LlamaServerTest.cpp - The llama-server peer client, on the real server
//
// Starts the peer's llama-server on SmolLM2 (skips when the binary, built by
// bench/peers/build_llama_cpp.sh, or the model is absent) and checks what the
// benchmarks rely on: its prompt cache, its timings, its answers, and that
// no server outlives the client, on success and on failure.
//
//===----------------------------------------------------------------------===//
#include "bench/peers/LlamaServer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace spanc::bench;

namespace {

std::string modelPath() {
  const char *root = std::getenv("SPANC_ROOT");
  return std::string(root ? root : ".") +
         "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/// Where build_llama_cpp.sh puts the server, for the account running the
/// test ($HOME is a scratch folder under bazel test).
std::string peerBinary() {
  if (const char *fromEnv = std::getenv("SPANC_LLAMA_SERVER"))
    if (*fromEnv)
      return fromEnv;
  const passwd *entry = getpwuid(getuid());
  return std::string(entry ? entry->pw_dir : "") +
         "/.cache/spanc/peers/llama.cpp/build/bin/llama-server";
}

/// True when no child of this process remains (running or unreaped).
bool noChildLeft() {
  errno = 0;
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

#define SKIP_WITHOUT_PEER()                                                    \
  do {                                                                         \
    if (!llvm::sys::fs::can_execute(peerBinary()))                             \
      GTEST_SKIP() << "no llama-server at " << peerBinary()                    \
                   << " (run bench/peers/build_llama_cpp.sh)";                 \
    if (!llvm::sys::fs::exists(modelPath()))                                   \
      GTEST_SKIP() << "model not found at " << modelPath();                    \
  } while (false)

// SmolLM2's ChatML, rendered by hand: the client sends raw prompts.
const char *kPrompt =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nName the capital of France and say one thing about "
    "it.<|im_end|>\n<|im_start|>assistant\n";

TEST(LlamaServer, MissingBinaryErrorSaysHowToBuildThePeer) {
  LlamaServerOptions options;
  options.modelPath = modelPath();
  options.binary = "/nonexistent/llama-server";
  auto server = LlamaServer::start(options);
  ASSERT_FALSE(bool(server));
  std::string message = llvm::toString(server.takeError());
  EXPECT_NE(message.find("/nonexistent/llama-server"), std::string::npos)
      << message;

  // A missing binary named by $SPANC_LLAMA_SERVER: the variable is named.
  setenv("SPANC_LLAMA_SERVER", "/nonexistent/bin/llama-server", 1);
  options.binary.clear();
  auto fromEnv = LlamaServer::start(options);
  unsetenv("SPANC_LLAMA_SERVER");
  ASSERT_FALSE(bool(fromEnv));
  message = llvm::toString(fromEnv.takeError());
  EXPECT_NE(message.find("SPANC_LLAMA_SERVER"), std::string::npos) << message;
}

TEST(LlamaServer, RepeatedPromptIsServedFromItsCache) {
  SKIP_WITHOUT_PEER();
  LlamaServerOptions options;
  options.binary = peerBinary();
  options.modelPath = modelPath();
  auto server = LlamaServer::start(options);
  ASSERT_TRUE(bool(server)) << llvm::toString(server.takeError());
  EXPECT_NE((*server)->describe().find("--cache-reuse 256"), std::string::npos)
      << (*server)->describe();
  EXPECT_NE((*server)->describe().find("-cram 0"), std::string::npos)
      << (*server)->describe();

  auto first = (*server)->complete(kPrompt, 8);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  // The whole prompt (~40 tokens) is computed the first time.
  EXPECT_GE(first->promptTokens, 30);
  EXPECT_GT(first->promptMs, 0);
  EXPECT_GE(first->wallMs, first->promptMs);
  EXPECT_FALSE(llvm::StringRef(first->text).trim().empty());

  auto second = (*server)->complete(kPrompt, 8);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  // The server recomputes at least one token of a cached prompt.
  EXPECT_LE(second->promptTokens, 2);
  EXPECT_GE(second->promptTokens, 0);
  // The whole prompt's length by the server's tokenizer, computed or not.
  EXPECT_EQ(second->promptTokensTotal, first->promptTokensTotal);
  EXPECT_GE(first->promptTokensTotal, first->promptTokens);
  // Temperature 0: the same answer.
  EXPECT_EQ(second->text, first->text);

  server->reset();
  EXPECT_TRUE(noChildLeft()) << "llama-server outlived its client";
}

TEST(LlamaServer, ServerThatCannotLoadTheModelFailsWithItsLog) {
  SKIP_WITHOUT_PEER();
  // Not a GGUF file: the server starts and then stops while loading.
  llvm::SmallString<128> notAModel;
  ASSERT_FALSE(
      llvm::sys::fs::createTemporaryFile("not-a-model", "gguf", notAModel));
  {
    std::FILE *file = std::fopen(notAModel.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("this is not a GGUF model\n", file);
    std::fclose(file);
  }
  LlamaServerOptions options;
  options.binary = peerBinary();
  options.modelPath = std::string(notAModel);
  auto server = LlamaServer::start(options);
  llvm::sys::fs::remove(notAModel);
  ASSERT_FALSE(bool(server));
  std::string message = llvm::toString(server.takeError());
  EXPECT_NE(message.find("stopped before it was ready"), std::string::npos)
      << message;
  // The log tail is quoted: the server's own words about the model.
  EXPECT_NE(message.find("load"), std::string::npos) << message;
  EXPECT_TRUE(noChildLeft()) << "a failed start left a server behind";
}

} // namespace
