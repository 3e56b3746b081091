//===- CommandLine.cpp - Shared option parsing for spanc subcommands ------===//

#include "tools/spanc/CommandLine.h"

#include "tools/spanc/Interrupt.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <limits>

namespace spanc::cli {

ParsedCommandLine
parseCommandLine(const char *command, const char *usage, const char *about,
                 const po::options_description &options,
                 const po::positional_options_description &positional,
                 const std::vector<std::string> &args) {
  po::options_description all;
  po::options_description help("General");
  help.add_options()("help,h", "show this help and exit");
  all.add(options).add(help);

  ParsedCommandLine result;
  try {
    po::store(
        po::command_line_parser(args).options(all).positional(positional).run(),
        result.values);
    if (result.values.count("help")) {
      llvm::outs() << "usage: " << usage << "\n\n" << about << "\n\n";
      std::ostringstream text;
      text << all;
      llvm::outs() << text.str();
      result.exitCode = 0;
      return result;
    }
    po::notify(result.values);
  } catch (const po::error &error) {
    result.exitCode = reportError(command, error.what());
    llvm::errs() << "usage: " << usage << " (see 'spanc " << command
                 << " --help')\n";
  }
  return result;
}

std::string defaultModelPath() {
  if (const char *fromEnvironment = std::getenv("SPANC_MODEL"))
    return fromEnvironment;
  const char *fileName = "SmolLM2-135M-Instruct.Q4_1.gguf";
  llvm::SmallString<256> local("models");
  llvm::sys::path::append(local, fileName);
  if (llvm::sys::fs::exists(local))
    return std::string(local);
  if (const char *home = std::getenv("HOME")) {
    llvm::SmallString<256> cached(home);
    llvm::sys::path::append(cached, ".cache/spanc/models", fileName);
    if (llvm::sys::fs::exists(cached))
      return std::string(cached);
  }
  return std::string(local);
}

int writeOutput(const char *command, const po::variables_map &values,
                const std::string &text) {
  if (interruptRequested())
    return reportInterrupted(command, "nothing was written");
  if (!values.count("output") || values["output"].as<std::string>() == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    return 0;
  }
  return writeFileAtomically(command, values["output"].as<std::string>(), text);
}

int writeFileAtomically(const char *command, const std::string &path,
                        llvm::StringRef text) {
  // Beside the target, so that the rename stays on one file system.
  llvm::SmallString<256> model(path);
  model += ".tmp-%%%%%%";
  llvm::SmallString<256> temporary;
  int descriptor = -1;
  if (std::error_code error =
          llvm::sys::fs::createUniqueFile(model, descriptor, temporary))
    return reportError(command,
                       "cannot write '" + path + "': " + error.message());
  setTemporaryFile(temporary);
  auto discard = [&](const std::string &message) {
    llvm::sys::fs::remove(temporary);
    clearTemporaryFile();
    return reportError(command, message);
  };
  {
    llvm::raw_fd_ostream out(descriptor, /*shouldClose=*/true);
    out << text;
    out.close();
    if (out.has_error()) {
      std::string message = out.error().message();
      out.clear_error();
      return discard("cannot write '" + path + "': " + message);
    }
  }
  if (interruptRequested()) {
    llvm::sys::fs::remove(temporary);
    clearTemporaryFile();
    return reportInterrupted(command, "'" + path + "' is as it was");
  }
  if (std::error_code error = llvm::sys::fs::rename(temporary, path))
    return discard("cannot write '" + path + "': " + error.message());
  clearTemporaryFile();
  return 0;
}

std::optional<int64_t> readBoundedInt(const char *command,
                                      const po::variables_map &values,
                                      const char *name, int64_t min,
                                      int64_t max) {
  int64_t value = values[name].as<int64_t>();
  if (value >= min && value <= max)
    return value;
  std::string range =
      max == std::numeric_limits<int64_t>::max()
          ? "at least " + std::to_string(min)
          : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  reportError(command, std::string("--") + name + " " + std::to_string(value) +
                           ": must be " + range);
  return std::nullopt;
}

int reportError(const char *command, const std::string &message) {
  llvm::errs() << "spanc " << command << ": error: " << message << "\n";
  return 1;
}

} // namespace spanc::cli
