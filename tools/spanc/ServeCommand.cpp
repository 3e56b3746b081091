//===- ServeCommand.cpp - spanc serve -------------------------------------===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

int runServe(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                              //
      ("model,m", po::value<std::string>(), "GGUF model to serve")   //
      ("host", po::value<std::string>()->default_value("127.0.0.1"), //
       "address to listen on (loopback by default)")                 //
      ("port", po::value<int>()->default_value(8080), "TCP port")    //
      ("cache", po::value<std::string>()->default_value("span"),     //
       "KV cache mode: span, prefix or off")                         //
      ("threads,t", po::value<int>(), "CPU threads (default: all cores)");
  ParsedCommandLine parsed = parseCommandLine(
      "serve", "spanc serve [options]",
      "Serves /v1/chat/completions, /v1/completions (SSE streaming),\n"
      "/v1/query (a .span program or spnl JSON), /metrics and /health.",
      options, po::positional_options_description(), args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  return notYetImplemented(
      "serve", "to be filed (docs/ARCHITECTURE.md, Not built yet)");
}

} // namespace spanc::cli
