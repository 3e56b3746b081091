//===- RunCommand.cpp - spanc run ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runRun(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "a .span or spnl .json program")("model,m", po::value<std::string>(), "GGUF model")("cache", po::value<std::string>()->default_value("span"), "KV cache mode: span, prefix or off")("stats", "per-call statistics");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed =
      parseCommandLine("run", "spanc run FILE [options]", "Compiles a span program and executes its queries on a model.", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("run", "#6");
}

} // namespace spanc::cli
