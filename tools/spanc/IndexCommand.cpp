//===- IndexCommand.cpp - spanc index ---===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runIndex(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()("input", po::value<std::string>()->required(), "corpus folder");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed =
      parseCommandLine("index", "spanc index DIR", "Chunks the .txt/.md files of a corpus into fragments and indexes them with SQLite FTS5 (BM25).", options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented("index", "#3");
}

} // namespace spanc::cli
