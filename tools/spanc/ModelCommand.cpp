//===- ModelCommand.cpp - spanc model ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runModel(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "info")("file", po::value<std::string>(), "GGUF file");
  po::positional_options_description positional;
  positional.add("input", 1).add("file", 1);
  ParsedCommandLine parsed =
      parseCommandLine("model", "spanc model info FILE", "Inspects a GGUF model: architecture, sizes, tensor types, chat template.", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("model", "#4");
}

} // namespace spanc::cli
