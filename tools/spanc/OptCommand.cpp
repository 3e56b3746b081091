//===- OptCommand.cpp - spanc opt ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runOpt(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "IR file")("passes", po::value<std::string>(), "comma-separated passes; empty: parse and print only")("print-ir-after-all", "print the IR after every pass")("output,o", po::value<std::string>(), "output file (default: stdout)");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed =
      parseCommandLine("opt", "spanc opt FILE.ir [--passes=a,b]", "Runs optimizer passes over textual span IR.", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("opt", "#3");
}

} // namespace spanc::cli
