//===- GenerateCommand.cpp - spanc generate ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runGenerate(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "the prompt")("model,m", po::value<std::string>(), "GGUF model");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed =
      parseCommandLine("generate", "spanc generate PROMPT [options]", "Streams a completion of PROMPT on a model, with TTFT and tokens/s on stderr.", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("generate", "#4");
}

} // namespace spanc::cli
