//===- ServerProcess.cpp - An HTTP server run as a child of a benchmark ---===//

#include "bench/common/ServerProcess.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace spanc::bench {

namespace {

constexpr auto kStopGrace = std::chrono::seconds(5);
constexpr size_t kLogTailLines = 12;
constexpr int kStartAttempts = 3;

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

std::string describeExit(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

} // namespace

std::string tailOfFile(llvm::StringRef path, size_t lines) {
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

llvm::Expected<std::unique_ptr<ServerProcess>>
ServerProcess::start(std::string name,
                     const std::vector<std::string> &arguments,
                     std::chrono::seconds startTimeout) {
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->name = std::move(name);
  llvm::SmallString<128> logPath;
  if (std::error_code error =
          llvm::sys::fs::createTemporaryFile(server->name, "log", logPath))
    return llvm::createStringError(error, "cannot create a temporary file");
  server->logPath = std::string(logPath);

  for (int attempt = 1;; ++attempt) {
    llvm::Expected<int> port = findFreePort();
    if (!port)
      return port.takeError();
    server->port_ = *port;
    std::vector<std::string> withAddress = arguments;
    withAddress.insert(withAddress.end(), {"--host", kLoopbackHost, "--port",
                                           std::to_string(*port)});
    if (llvm::Error error = server->spawn(withAddress))
      return error;
    llvm::Error ready = server->waitUntilHealthy(startTimeout);
    if (!ready)
      return server;
    bool bindFailed =
        !server->alive() &&
        llvm::StringRef(tailOfFile(server->logPath, kLogTailLines))
            .contains_insensitive("bind");
    if (!bindFailed || attempt == kStartAttempts)
      return ready; // the destructor stops the server
    llvm::consumeError(std::move(ready));
  }
}

ServerProcess::~ServerProcess() {
  stop();
  if (!logPath.empty())
    llvm::sys::fs::remove(logPath);
}

bool ServerProcess::alive() {
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

std::string ServerProcess::stop() {
  if (alive()) {
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
  return reaped ? describeExit(exitStatus) : "never started";
}

llvm::Error ServerProcess::failure(const llvm::Twine &what) {
  std::string state = alive() ? name + " is still running"
                              : name + " " + describeExit(exitStatus);
  return llvm::createStringError(std::errc::io_error, "%s; %s; log %s:\n%s",
                                 what.str().c_str(), state.c_str(),
                                 logPath.c_str(),
                                 tailOfFile(logPath, kLogTailLines).c_str());
}

llvm::Error ServerProcess::spawn(const std::vector<std::string> &arguments) {
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::vector<char *> argv;
  for (const std::string &argument : arguments)
    argv.push_back(const_cast<char *>(argument.c_str()));
  argv.push_back(nullptr);
  int logFd =
      open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logFd < 0)
    return llvm::createStringError(
        std::error_code(errno, std::generic_category()),
        "cannot open the %s log '%s'", name.c_str(), logPath.c_str());
  const std::string execFailed = "exec of " + name + " failed\n";
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
    ssize_t ignored =
        write(STDERR_FILENO, execFailed.data(), execFailed.size());
    (void)ignored;
    _exit(127);
  }
  int forkError = errno;
  close(logFd);
  if (child < 0)
    return llvm::createStringError(
        std::error_code(forkError, std::generic_category()), "cannot start %s",
        name.c_str());
  pid = child;
  reaped = false;
  return llvm::Error::success();
}

llvm::Error ServerProcess::waitUntilHealthy(std::chrono::seconds timeout) {
  httplib::Client probe(kLoopbackHost, port_);
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(5, 0);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive())
      return failure(name + " stopped before it was ready");
    if (auto response = probe.Get("/health"))
      if (response->status == 200)
        return llvm::Error::success();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return failure(llvm::Twine(name) + " did not answer /health within " +
                 llvm::Twine(int(timeout.count())) + " s");
}

} // namespace spanc::bench
