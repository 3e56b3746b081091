//===- main.cpp - spanc: the span query compiler and runtime --------------===//
//
// Dispatches `spanc SUBCOMMAND ...` to the subcommand's own file. Each
// subcommand is thin: options, one library call, an exit code.
//
//===----------------------------------------------------------------------===//

#include "tools/spanc/CommandLine.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/Version.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <unistd.h>

using namespace spanc::cli;

static void printUsage(llvm::raw_ostream &os) {
  os << "usage: spanc SUBCOMMAND [options]\n"
        "\n"
        "spanc compiles span queries (.span files or spnl JSON) to an SSA IR,\n"
        "optimizes them, and runs them against a span-aware KV cache.\n"
        "\n"
        "Subcommands:\n";
  for (const Subcommand &command : subcommands())
    os << "  " << llvm::left_justify(command.name, 10) << command.summary
       << "\n";
  os << "\n'spanc SUBCOMMAND --help' describes a subcommand's options.\n"
        "  --version   print the version and exit\n\n"
     << limitsHelp(AllLimits);
}

int main(int argc, char **argv) {
  // Under `bazel run`, resolve relative paths against the caller's folder.
  if (const char *callerDir = std::getenv("BUILD_WORKING_DIRECTORY"))
    if (chdir(callerDir) != 0)
      llvm::errs() << "spanc: warning: cannot enter " << callerDir << "\n";

  if (argc < 2) {
    printUsage(llvm::errs());
    return 1;
  }
  llvm::StringRef first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    printUsage(llvm::outs());
    return 0;
  }
  if (first == "--version") {
    llvm::outs() << "spanc " << spanc::kVersion << "\n";
    return 0;
  }
  for (const Subcommand &command : subcommands())
    if (first == command.name)
      return command.run(std::vector<std::string>(argv + 2, argv + argc));

  llvm::errs() << "spanc: error: unknown subcommand '" << first << "'\n";
  printUsage(llvm::errs());
  return 1;
}
