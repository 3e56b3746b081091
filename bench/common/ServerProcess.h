//===- ServerProcess.h - An HTTP server run as a child of a benchmark -----===//
//
// Benchmarks that measure a server from the outside (llama.cpp's
// llama-server beside spanc, `spanc serve` itself) start it as a child
// process on a free loopback port, with its log in a temporary file, and
// wait until GET /health answers 200. Every failure quotes the tail of that
// log, since a server says why it stopped there and nowhere else. The child
// is tied to this process (PR_SET_PDEATHSIG), so a benchmark killed mid-run
// leaves no server behind, and the destructor stops it on every other path.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_SERVERPROCESS_H
#define SPANC_BENCH_COMMON_SERVERPROCESS_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace spanc::bench {

/// The address every child server listens on.
constexpr const char *kLoopbackHost = "127.0.0.1";

class ServerProcess {
public:
  /// Runs `arguments` (the binary first) followed by `--host 127.0.0.1
  /// --port P` for a free port P and waits up to `startTimeout` for
  /// /health. `name` is what messages call it ("llama-server"). A port
  /// taken between choosing it and the server binding it is retried.
  static llvm::Expected<std::unique_ptr<ServerProcess>>
  start(std::string name, const std::vector<std::string> &arguments,
        std::chrono::seconds startTimeout = std::chrono::seconds(180));
  /// SIGTERM, then SIGKILL after a grace period; removes the log.
  ~ServerProcess();
  ServerProcess(const ServerProcess &) = delete;
  ServerProcess &operator=(const ServerProcess &) = delete;

  int port() const { return port_; }
  /// True while the child runs; reaps it (once) when it has ended.
  bool alive();
  /// "<what>; NAME <how it ended, or is still running>; log PATH:\n<tail>".
  llvm::Error failure(const llvm::Twine &what);
  /// Stops the child now (the destructor does it too); returns how it
  /// ended ("exited with status 0").
  std::string stop();

private:
  ServerProcess() = default;
  llvm::Error spawn(const std::vector<std::string> &arguments);
  llvm::Error waitUntilHealthy(std::chrono::seconds timeout);

  std::string name;
  int pid = -1;
  int port_ = 0;
  std::string logPath;
  bool reaped = false;
  int exitStatus = 0;
};

/// The last `lines` lines of the file at `path` ("(no log)" when unreadable).
std::string tailOfFile(llvm::StringRef path, size_t lines);

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_SERVERPROCESS_H
