//===- Interrupt.h - SIGINT and SIGTERM: stop at the next safe point ------===//
//
// By default a signal ends spanc where it stands: a half-written output, an
// index transaction left to SQLite's journal. A subcommand that calls
// deferInterrupts() instead gets the first SIGINT or SIGTERM as a request,
// which it polls at its safe points (between scheduler steps, generated
// tokens, corpus files, compiler stages): it stops there, leaves every file
// complete or as it was, says so on stderr and exits with 128 + the
// signal's number (130 for SIGINT, 143 for SIGTERM), as a shell does. A
// second signal ends the process at once, removing the temporary file an
// output was being written to first.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_INTERRUPT_H
#define SPANC_TOOLS_SPANC_INTERRUPT_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace spanc::cli {

/// From now on the first SIGINT or SIGTERM is only recorded (and a line on
/// stderr says spanc is stopping); a second one ends the process.
void deferInterrupts();

/// Whether a deferred signal arrived.
bool interruptRequested();

/// 128 + the signal's number; 0 when none arrived.
int interruptExitCode();

/// Prints "spanc COMMAND: interrupted by SIGINT: WHAT" and returns
/// interruptExitCode().
int reportInterrupted(const char *command, const std::string &what);

/// While set, a signal that ends the process removes `path` first (a
/// temporary output file); clearTemporaryFile() forgets it.
void setTemporaryFile(llvm::StringRef path);
void clearTemporaryFile();

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_INTERRUPT_H
