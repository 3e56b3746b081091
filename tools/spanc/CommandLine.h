//===- CommandLine.h - Shared option parsing for spanc subcommands --------===//
//
// Each subcommand declares its Boost.Program_options description and calls
// parseCommandLine(), which handles --help and reports bad options the same
// way everywhere: "spanc SUB: error: ..." and exit code 1.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_COMMANDLINE_H
#define SPANC_TOOLS_SPANC_COMMANDLINE_H

#include "llvm/ADT/StringRef.h"

#include <boost/program_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spanc::cli {

namespace po = boost::program_options;

/// A subcommand: its name, a one-line summary for `spanc --help`, and its
/// entry point, which receives the arguments after the subcommand name.
struct Subcommand {
  const char *name;
  const char *summary;
  int (*run)(const std::vector<std::string> &args);
};

/// All subcommands, in the order `spanc --help` lists them.
const std::vector<Subcommand> &subcommands();

/// What parseCommandLine() decided.
struct ParsedCommandLine {
  po::variables_map values;
  /// Set when the command line was handled already (--help printed, or an
  /// error reported); the subcommand returns this exit code.
  std::optional<int> exitCode;
};

/// Parses `args` against `options` (plus --help) with `positional` names.
/// `usage` is the synopsis line, e.g. "spanc compile FILE [options]".
ParsedCommandLine
parseCommandLine(const char *command, const char *usage, const char *about,
                 const po::options_description &options,
                 const po::positional_options_description &positional,
                 const std::vector<std::string> &args);

/// The model a subcommand uses without --model: $SPANC_MODEL if set, else
/// models/SmolLM2-135M-Instruct.Q4_1.gguf (as tools/setup.sh installs it)
/// in the working folder, else in ~/.cache/spanc/models/.
std::string defaultModelPath();

/// Writes `text` to the file named by option `output` (`-o`), or to stdout
/// when it is absent or "-"; returns the exit code. A file is written
/// whole or not at all (writeFileAtomically), and nothing is written once
/// an interrupt was requested (Interrupt.h).
int writeOutput(const char *command, const po::variables_map &values,
                const std::string &text);

/// Writes `text` to a temporary file beside `path` and renames it over
/// `path`, so that `path` is never seen half written; a failure or an
/// interrupt leaves `path` as it was. Returns the exit code.
int writeFileAtomically(const char *command, const std::string &path,
                        llvm::StringRef text);

/// Prints "spanc COMMAND: error: MESSAGE" to stderr and returns 1.
int reportError(const char *command, const std::string &message);

/// Reads integer option `name` (declared as po::value<int64_t>, so that a
/// negative value is seen as one, not wrapped around) and checks that it
/// is in [min, max]; otherwise reports "--NAME VALUE: must be in [min,
/// max]" (or "at least min" when max is INT64_MAX) and returns nullopt.
std::optional<int64_t> readBoundedInt(const char *command,
                                      const po::variables_map &values,
                                      const char *name, int64_t min,
                                      int64_t max);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_COMMANDLINE_H
