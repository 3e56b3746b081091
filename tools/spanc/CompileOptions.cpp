//===- CompileOptions.cpp - The compile options the subcommands share -----===//

#include "tools/spanc/CompileOptions.h"

#include "frontend/Lowering.h"
#include "tools/spanc/CommandLine.h"

#include <limits>
#include <optional>

namespace spanc::cli {

namespace {
/// The IR's bound on a gen's reduce= (ir/IR.cpp).
constexpr int64_t kMaxTreeReduce = 1'000'000'000;
} // namespace

void addMaxCallsOption(po::options_description &options) {
  options.add_options()(
      "max-calls", po::value<int64_t>(),
      ("the most model calls a program may make, and the most samples its "
       "repeats may expand to in all (default " +
       std::to_string(codegen::kDefaultMaxCalls) +
       "); past it, lowering stops with an error at the op, before any "
       "model runs")
          .c_str());
}

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
  if (values.count("tree-reduce")) {
    // A fan-in of 1 would never reduce; 0 leaves gens without reduce= be.
    std::optional<int64_t> fanIn =
        readBoundedInt(command, values, "tree-reduce", 0, kMaxTreeReduce);
    if (!fanIn)
      return false;
    if (*fanIn == 1) {
      reportError(command, "--tree-reduce 1: the fan-in must be at least 2 "
                           "(or 0: off)");
      return false;
    }
    options.passes.treeReduce = unsigned(*fanIn);
  }
  options.passes.prepareFragments = values.count("prepare-fragments") != 0;
  if (values.count("max-calls")) {
    std::optional<int64_t> maxCalls = readBoundedInt(
        command, values, "max-calls", 1, std::numeric_limits<int64_t>::max());
    if (!maxCalls)
      return false;
    options.limits.maxCalls = *maxCalls;
  }
  if (values.count("skip-pass"))
    options.skipPasses = values["skip-pass"].as<std::vector<std::string>>();
  return true;
}

} // namespace spanc::cli
