//===- Subcommands.cpp - The table of spanc subcommands -------------------===//

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

// Defined one per file: tools/spanc/<Name>Command.cpp.
int runCompile(const std::vector<std::string> &args);
int runOpt(const std::vector<std::string> &args);
int runIndex(const std::vector<std::string> &args);
int runRun(const std::vector<std::string> &args);
int runGenerate(const std::vector<std::string> &args);
int runServe(const std::vector<std::string> &args);
int runBench(const std::vector<std::string> &args);
int runTokenize(const std::vector<std::string> &args);
int runModel(const std::vector<std::string> &args);
int runCpu(const std::vector<std::string> &args);

const std::vector<Subcommand> &subcommands() {
  static const std::vector<Subcommand> table = {
      {"compile", "parse a .span/.json/.ir program; emit AST, IR or plan",
       runCompile},
      {"opt", "run optimizer passes over textual IR", runOpt},
      {"index", "build or refresh the BM25 index of a corpus folder", runIndex},
      {"run", "compile and execute span queries on a model", runRun},
      {"generate", "stream a completion for a plain prompt", runGenerate},
      {"serve", "OpenAI-compatible HTTP server with /v1/query", runServe},
      {"bench", "built-in benchmarks (engine, kv, rag, ...)", runBench},
      {"tokenize", "print a model's token ids and pieces for a text",
       runTokenize},
      {"model", "inspect a GGUF model (model info FILE)", runModel},
      {"cpu", "list the kernel paths (--isa levels) this CPU runs", runCpu},
  };
  return table;
}

} // namespace spanc::cli
