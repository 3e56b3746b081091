//===- CompileOptions.cpp - The compile options the subcommands share -----===//

#include "tools/spanc/CompileOptions.h"

#include "frontend/Lowering.h"
#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

bool readCompileOptions(const char *command, const po::variables_map &values,
                        codegen::CompileOptions &options) {
  if (values.count("set"))
    for (const std::string &text :
         values["set"].as<std::vector<std::string>>()) {
      std::pair<std::string, std::string> override;
      if (!frontend::parseParamOverride(text, override)) {
        reportError(command, "--set takes NAME=VALUE, got '" + text + "'");
        return false;
      }
      options.frontend.paramOverrides.push_back(std::move(override));
    }
  if (values.count("tree-reduce"))
    options.passes.treeReduce = values["tree-reduce"].as<unsigned>();
  options.passes.prepareFragments = values.count("prepare-fragments") != 0;
  if (values.count("skip-pass"))
    options.skipPasses = values["skip-pass"].as<std::vector<std::string>>();
  return true;
}

} // namespace spanc::cli
