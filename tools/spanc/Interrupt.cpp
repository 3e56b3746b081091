//===- Interrupt.cpp - SIGINT and SIGTERM: stop at the next safe point ----===//

#include "tools/spanc/Interrupt.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstring>
#include <pthread.h>
#include <unistd.h>

namespace spanc::cli {

namespace {

volatile std::sig_atomic_t receivedSignal = 0;
/// The temporary file to remove before dying; written only outside the
/// handler, with the signals blocked (setTemporaryFile).
char temporaryFile[PATH_MAX] = {};

/// Async-signal-safe: only write(2), unlink(2), signal(2) and raise(3).
void handleSignal(int signal) {
  if (receivedSignal == 0) {
    receivedSignal = signal;
    const char message[] =
        "\nspanc: stopping at the next safe point (signal again to stop at "
        "once)\n";
    ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
    (void)ignored;
    return;
  }
  if (temporaryFile[0] != '\0')
    ::unlink(temporaryFile);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

/// Runs `change` with SIGINT and SIGTERM blocked, so the handler never sees
/// a half-copied path.
template <typename Change> void withSignalsBlocked(Change change) {
  sigset_t blocked, previous;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  change();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

} // namespace

void deferInterrupts() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = handleSignal;
  sigemptyset(&action.sa_mask);
  // Interrupted reads and writes resume: the safe points do the stopping.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interruptRequested() { return receivedSignal != 0; }

int interruptExitCode() {
  return receivedSignal == 0 ? 0 : 128 + int(receivedSignal);
}

int reportInterrupted(const char *command, const std::string &what) {
  llvm::errs() << "spanc " << command << ": interrupted by "
               << (receivedSignal == SIGTERM ? "SIGTERM" : "SIGINT") << ": "
               << what << "\n";
  llvm::errs().flush();
  return interruptExitCode();
}

void setTemporaryFile(llvm::StringRef path) {
  withSignalsBlocked([&] {
    size_t length = std::min(path.size(), sizeof(temporaryFile) - 1);
    std::memcpy(temporaryFile, path.data(), length);
    temporaryFile[length] = '\0';
  });
}

void clearTemporaryFile() {
  withSignalsBlocked([] { temporaryFile[0] = '\0'; });
}

} // namespace spanc::cli
