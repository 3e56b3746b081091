//===- TokenizeCommand.cpp - spanc tokenize ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runTokenize(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "text to tokenize")("model,m", po::value<std::string>(), "GGUF model");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed =
      parseCommandLine("tokenize", "spanc tokenize TEXT [options]", "Prints the token ids and pieces of TEXT under a model vocabulary.", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("tokenize", "#4");
}

} // namespace spanc::cli
