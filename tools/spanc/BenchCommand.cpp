//===- BenchCommand.cpp - spanc bench -------------------------------------===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runBench(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                  //
      ("name", po::value<std::string>()->required(),                     //
       "benchmark: engine, kv, rag, nested, bulk, needle, accuracy")     //
      ("model,m", po::value<std::string>(), "GGUF model")                //
      ("threads,t", po::value<int>(), "CPU threads (default: all cores)") //
      ("quick", "a small size for a smoke test");
  po::positional_options_description positional;
  positional.add("name", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "bench", "spanc bench NAME [options]",
      "Runs a built-in benchmark and prints its table; bench/run_all.sh\n"
      "writes the tables and plots under bench/results/.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("bench", "#4 (engine), #5 (kv) and #7 (paper)");
}

} // namespace spanc::cli
