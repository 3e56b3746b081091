//===- LlamaServer.cpp - llama.cpp's llama-server as a benchmark peer -----===//
//
// The server runs as a child process (bench/common/ServerProcess.h: a free
// loopback port, its log quoted by every failure, tied to this process);
// this file finds the binary, chooses its flags and speaks its API.
//
//===----------------------------------------------------------------------===//
#include "bench/peers/LlamaServer.h"

#include "bench/common/ServerProcess.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <pwd.h>
#include <unistd.h>

namespace spanc::bench {

namespace {

/// Loading a model on a loaded 2-core machine can take tens of seconds.
constexpr auto kStartTimeout = std::chrono::seconds(180);
/// A long prompt on a loaded machine: minutes, not hours.
constexpr time_t kRequestTimeoutSeconds = 900;

std::string homeDirectory() {
  if (const char *home = std::getenv("HOME"))
    if (*home)
      return home;
  if (const passwd *entry = getpwuid(getuid()))
    return entry->pw_dir;
  return "";
}

/// The binary named in the options, else $SPANC_LLAMA_SERVER, else the cache
/// build_llama_cpp.sh fills. Under `bazel test` $HOME may be a scratch
/// folder, so the account's home is tried too.
llvm::Expected<std::string> findBinary(const LlamaServerOptions &options) {
  if (!options.binary.empty()) {
    if (!llvm::sys::fs::can_execute(options.binary))
      return llvm::createStringError(
          std::errc::no_such_file_or_directory,
          "llama-server binary '%s' does not exist or is not executable",
          options.binary.c_str());
    return options.binary;
  }
  if (const char *fromEnv = std::getenv("SPANC_LLAMA_SERVER"))
    if (*fromEnv) {
      if (!llvm::sys::fs::can_execute(fromEnv))
        return llvm::createStringError(
            std::errc::no_such_file_or_directory,
            "$SPANC_LLAMA_SERVER names '%s', which does not exist or is not "
            "executable",
            fromEnv);
      return std::string(fromEnv);
    }
  const char *suffix = ".cache/spanc/peers/llama.cpp/build/bin/llama-server";
  llvm::SmallVector<std::string, 2> candidates;
  candidates.push_back(homeDirectory());
  if (const passwd *entry = getpwuid(getuid()))
    candidates.push_back(entry->pw_dir);
  for (const std::string &home : candidates) {
    llvm::SmallString<256> path(home);
    llvm::sys::path::append(path, suffix);
    if (llvm::sys::fs::can_execute(path))
      return std::string(path);
  }
  return llvm::createStringError(
      std::errc::no_such_file_or_directory,
      "llama-server not found at ~/%s; build the peer with "
      "bench/peers/build_llama_cpp.sh (or set $SPANC_LLAMA_SERVER)",
      suffix);
}

} // namespace

struct LlamaServer::Impl {
  std::unique_ptr<ServerProcess> process;
  std::string description;
  std::unique_ptr<httplib::Client> client;

  llvm::Error failure(const llvm::Twine &what) {
    return process->failure(what);
  }
};

llvm::Expected<std::unique_ptr<LlamaServer>>
LlamaServer::start(const LlamaServerOptions &options) {
  llvm::Expected<std::string> binary = findBinary(options);
  if (!binary)
    return binary.takeError();
  if (!llvm::sys::fs::exists(options.modelPath))
    return llvm::createStringError(std::errc::no_such_file_or_directory,
                                   "model '%s' does not exist",
                                   options.modelPath.c_str());

  // The version for result files; a binary that cannot say it will not
  // serve either, so its failure is reported here, early.
  llvm::SmallString<128> versionPath;
  if (std::error_code error = llvm::sys::fs::createTemporaryFile(
          "llama-server-version", "log", versionPath))
    return llvm::createStringError(error, "cannot create a temporary file");
  llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, versionPath.str(),
                                                 versionPath.str()};
  std::string errorMessage;
  int versionStatus =
      llvm::sys::ExecuteAndWait(*binary, {*binary, "--version"}, llvm::None,
                                redirects, 60, 0, &errorMessage);
  std::string versionText = tailOfFile(versionPath, 4);
  llvm::sys::fs::remove(versionPath);
  if (versionStatus != 0)
    return llvm::createStringError(
        std::errc::io_error, "'%s --version' failed (%s): %s", binary->c_str(),
        errorMessage.empty()
            ? ("status " + std::to_string(versionStatus)).c_str()
            : errorMessage.c_str(),
        versionText.c_str());
  std::string version = "unknown version";
  for (llvm::StringRef line : llvm::split(versionText, '\n'))
    if (line.consume_front("version:"))
      version = line.trim().str();

  std::unique_ptr<LlamaServer> server(new LlamaServer());
  server->impl = std::make_unique<Impl>();
  Impl &impl = *server->impl;
  std::vector<std::string> flags = {"-c",
                                    std::to_string(options.contextTokens),
                                    "-t",
                                    std::to_string(options.threads),
                                    "-np",
                                    std::to_string(options.parallel),
                                    "--cache-reuse",
                                    std::to_string(options.cacheReuse)};
  if (!options.ramCache) {
    flags.push_back("-cram");
    flags.push_back("0");
  }
  flags.insert(flags.end(), options.extraArgs.begin(), options.extraArgs.end());
  std::vector<std::string> arguments = {*binary, "-m", options.modelPath};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  auto process = ServerProcess::start("llama-server", arguments, kStartTimeout);
  if (!process)
    return process.takeError();
  impl.process = std::move(*process);

  impl.client =
      std::make_unique<httplib::Client>(kLoopbackHost, impl.process->port());
  impl.client->set_connection_timeout(10, 0);
  impl.client->set_read_timeout(kRequestTimeoutSeconds, 0);
  impl.client->set_write_timeout(60, 0);
  impl.client->set_keep_alive(true);
  impl.description = "llama-server " + version + " (" +
                     llvm::join(flags.begin(), flags.end(), " ") + ")";
  return server;
}

LlamaServer::~LlamaServer() = default;

llvm::Expected<PeerCompletion> LlamaServer::complete(llvm::StringRef prompt,
                                                     int predictTokens) {
  nlohmann::json request = {{"prompt", prompt.str()},
                            {"n_predict", predictTokens},
                            {"cache_prompt", true},
                            {"temperature", 0.0}};
  auto begin = std::chrono::steady_clock::now();
  httplib::Result response =
      impl->client->Post("/completion", request.dump(), "application/json");
  auto end = std::chrono::steady_clock::now();
  if (!response)
    return impl->failure("POST /completion failed: " +
                         httplib::to_string(response.error()));
  if (response->status != 200)
    return impl->failure("POST /completion answered " +
                         llvm::Twine(response->status) + ": " +
                         llvm::StringRef(response->body).take_front(400));
  nlohmann::json body = nlohmann::json::parse(response->body, nullptr,
                                              /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || !body.contains("timings") ||
      !body["timings"].is_object() || !body.contains("content") ||
      !body["content"].is_string())
    return impl->failure(
        "POST /completion: the answer is not a completion with timings: " +
        llvm::StringRef(response->body).take_front(400));
  const nlohmann::json &timings = body["timings"];
  if (!timings.contains("prompt_ms") || !timings["prompt_ms"].is_number() ||
      !timings.contains("prompt_n") || !timings["prompt_n"].is_number())
    return impl->failure("POST /completion: timings without prompt_ms and "
                         "prompt_n: " +
                         timings.dump());
  PeerCompletion completion;
  completion.promptMs = timings["prompt_ms"].get<double>();
  completion.promptTokens = timings["prompt_n"].get<int>();
  if (body.contains("tokens_evaluated") &&
      body["tokens_evaluated"].is_number_integer())
    completion.promptTokensTotal = body["tokens_evaluated"].get<int>();
  completion.wallMs =
      std::chrono::duration<double, std::milli>(end - begin).count();
  completion.text = body["content"].get<std::string>();
  return completion;
}

const std::string &LlamaServer::describe() const { return impl->description; }

int LlamaServer::port() const { return impl->process->port(); }

} // namespace spanc::bench
