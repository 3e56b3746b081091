//===- LlamaServer.cpp - llama.cpp's llama-server as a benchmark peer -----===//
//
// The server runs as a child process on a free loopback port with its log
// in a temporary file; every failure quotes the tail of that log, since the
// server says why it stopped there and nowhere else. The child is tied to
// this process (PR_SET_PDEATHSIG) so that a benchmark killed mid-run leaves
// no server behind, and the destructor stops it on every other path.
//
//===----------------------------------------------------------------------===//
#include "bench/peers/LlamaServer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace spanc::bench {

namespace {

constexpr const char *kHost = "127.0.0.1";
/// Loading a model on a loaded 2-core machine can take tens of seconds.
constexpr auto kStartTimeout = std::chrono::seconds(180);
constexpr auto kStopGrace = std::chrono::seconds(5);
/// A long prompt on a loaded machine: minutes, not hours.
constexpr time_t kRequestTimeoutSeconds = 900;
constexpr size_t kLogTailLines = 12;

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

/// A port nobody listens on now: bind port 0 and read what the kernel gave.
/// Another process may take it before the server binds; start() retries.
llvm::Expected<int> findFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return llvm::errorCodeToError(
        std::error_code(errno, std::generic_category()));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0) {
    int error = errno;
    close(fd);
    return llvm::createStringError(
        std::error_code(error, std::generic_category()),
        "cannot find a free loopback port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

std::string tailOf(llvm::StringRef path, size_t lines) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return "(no log)";
  llvm::StringRef text = (*buffer)->getBuffer().rtrim();
  size_t start = text.size();
  for (size_t seen = 0; start > 0 && seen < lines;) {
    start = text.rfind('\n', start - 1);
    if (start == llvm::StringRef::npos) {
      start = 0;
      break;
    }
    ++seen;
  }
  return text.drop_front(start).ltrim('\n').str();
}

std::string describeExit(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

} // namespace

struct LlamaServer::Impl {
  pid_t pid = -1;
  int port = 0;
  std::string logPath;
  std::string description;
  std::unique_ptr<httplib::Client> client;

  /// Set once the child has been reaped (died on its own or was stopped).
  bool reaped = false;
  int exitStatus = 0;

  ~Impl() {
    stop();
    if (!logPath.empty())
      llvm::sys::fs::remove(logPath);
  }

  /// True while the child runs; reaps it (once) when it has ended.
  bool alive() {
    if (pid <= 0 || reaped)
      return false;
    int status = 0;
    pid_t result = waitpid(pid, &status, WNOHANG);
    if (result == 0)
      return true;
    reaped = true;
    exitStatus = status;
    return false;
  }

  void stop() {
    client.reset();
    if (!alive())
      return;
    kill(pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    while (alive() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (alive()) {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      reaped = true;
      exitStatus = status;
    }
  }

  /// "<what>; llama-server <how it ended>; its last log lines: ..."
  llvm::Error failure(const llvm::Twine &what) {
    std::string state = alive() ? "llama-server is still running"
                                : "llama-server " + describeExit(exitStatus);
    return llvm::createStringError(
        std::errc::io_error, "%s; %s; log %s:\n%s", what.str().c_str(),
        state.c_str(), logPath.c_str(), tailOf(logPath, kLogTailLines).c_str());
  }

  /// fork + exec with the log as stdout and stderr. Everything the child
  /// needs is prepared before fork: after it, only async-signal-safe calls.
  llvm::Error spawn(const std::vector<std::string> &arguments) {
    std::vector<char *> argv;
    for (const std::string &argument : arguments)
      argv.push_back(const_cast<char *>(argument.c_str()));
    argv.push_back(nullptr);
    int logFd =
        open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logFd < 0)
      return llvm::createStringError(
          std::error_code(errno, std::generic_category()),
          "cannot open the llama-server log '%s'", logPath.c_str());
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
      // Die with the benchmark, so a killed run leaves no server behind.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent)
        _exit(127);
      int devNull = open("/dev/null", O_RDONLY);
      if (devNull >= 0)
        dup2(devNull, STDIN_FILENO);
      dup2(logFd, STDOUT_FILENO);
      dup2(logFd, STDERR_FILENO);
      execv(argv[0], argv.data());
      const char message[] = "exec of llama-server failed\n";
      ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
      (void)ignored;
      _exit(127);
    }
    int forkError = errno;
    close(logFd);
    if (child < 0)
      return llvm::createStringError(
          std::error_code(forkError, std::generic_category()),
          "cannot start llama-server");
    pid = child;
    reaped = false;
    return llvm::Error::success();
  }

  /// Polls /health until it answers 200 (503 while the model loads).
  llvm::Error waitUntilHealthy() {
    httplib::Client probe(kHost, port);
    probe.set_connection_timeout(1, 0);
    probe.set_read_timeout(5, 0);
    auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!alive())
        return failure("llama-server stopped before it was ready");
      if (auto response = probe.Get("/health"))
        if (response->status == 200)
          return llvm::Error::success();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return failure(llvm::Twine("llama-server did not answer /health within ") +
                   llvm::Twine(int(kStartTimeout.count())) + " s");
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
  std::string versionText = tailOf(versionPath, 4);
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
  llvm::SmallString<128> logPath;
  if (std::error_code error =
          llvm::sys::fs::createTemporaryFile("llama-server", "log", logPath))
    return llvm::createStringError(error, "cannot create a temporary file");
  impl.logPath = std::string(logPath);

  std::vector<std::string> flags = {"-c",
                                    std::to_string(options.contextTokens),
                                    "-t",
                                    std::to_string(options.threads),
                                    "-np",
                                    "1",
                                    "--cache-reuse",
                                    std::to_string(options.cacheReuse)};
  if (!options.ramCache) {
    flags.push_back("-cram");
    flags.push_back("0");
  }
  flags.insert(flags.end(), options.extraArgs.begin(), options.extraArgs.end());

  // A port found free may be taken before the server binds it: retry with
  // another one when the server stops before it is healthy.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    llvm::Expected<int> port = findFreePort();
    if (!port)
      return port.takeError();
    impl.port = *port;
    std::vector<std::string> arguments = {*binary, "-m", options.modelPath};
    arguments.insert(arguments.end(), flags.begin(), flags.end());
    arguments.insert(arguments.end(),
                     {"--host", kHost, "--port", std::to_string(impl.port)});
    if (llvm::Error error = impl.spawn(arguments))
      return error;
    llvm::Error ready = impl.waitUntilHealthy();
    if (!ready)
      break;
    bool bindFailed =
        !impl.alive() && llvm::StringRef(tailOf(impl.logPath, kLogTailLines))
                             .contains_insensitive("bind");
    if (!bindFailed || attempt == kAttempts)
      return ready; // ~Impl stops the server.
    llvm::consumeError(std::move(ready));
  }

  impl.client = std::make_unique<httplib::Client>(kHost, impl.port);
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
  completion.wallMs =
      std::chrono::duration<double, std::milli>(end - begin).count();
  completion.text = body["content"].get<std::string>();
  return completion;
}

const std::string &LlamaServer::describe() const { return impl->description; }

} // namespace spanc::bench
