//===- CompileOptions.cpp - The compile options the subcommands share -----===//

#include "tools/spanc/CompileOptions.h"

#include "frontend/Lowering.h"
#include "retrieval/CorpusIndex.h"
#include "support/FileAccess.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/Support/FileSystem.h"

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

void addFileAccessOptions(po::options_description &options) {
  static const std::string maxFileHelp =
      "the largest file file(\"...\") or a corpus may read: bytes, or a "
      "number with KiB, MiB, GiB (default " +
      std::to_string(support::kDefaultMaxFileBytes >> 20) + "MiB)";
  static const std::string maxFragmentsHelp =
      "the most fragments one corpus may be cut into (default " +
      std::to_string(retrieval::kDefaultMaxFragments) + ")";
  options.add_options()                                                    //
      ("allow-read", po::value<std::vector<std::string>>()->composing(),   //
       "DIR: what spanc reads for a program (file(\"...\"), retrieve "     //
       "corpora, the files their links lead to) may also lie under DIR "   //
       "(repeatable). Without it only the program's own folder is read "   //
       "(for spanc index, the corpus); paths are checked after resolving " //
       "links and '..', and only regular files are read")                  //
      ("max-file-size", po::value<std::string>(), maxFileHelp.c_str())     //
      ("index-dir", po::value<std::string>(),                              //
       "DIR: where corpus indexes are kept, never in the corpus itself "   //
       "(default: $SPANC_INDEX_DIR, else ~/.cache/spanc/index, or under "  //
       "$XDG_CACHE_HOME when that is set)")                                //
      ("max-corpus-fragments", po::value<uint64_t>(),                      //
       maxFragmentsHelp.c_str());
}

bool readFileAccessOptions(const char *command, const po::variables_map &values,
                           retrieval::IndexOptions &index) {
  if (values.count("allow-read"))
    for (const std::string &folder :
         values["allow-read"].as<std::vector<std::string>>()) {
      if (!llvm::sys::fs::is_directory(folder)) {
        reportError(command, "--allow-read '" + folder + "': not a folder");
        return false;
      }
      index.readPolicy.roots.push_back(folder);
    }
  if (values.count("max-file-size")) {
    auto size =
        support::parseByteSize(values["max-file-size"].as<std::string>());
    if (!size) {
      reportError(command,
                  "--max-file-size " + llvm::toString(size.takeError()));
      return false;
    }
    index.readPolicy.maxFileBytes = *size;
  }
  if (values.count("index-dir"))
    index.indexDirectory = values["index-dir"].as<std::string>();
  if (values.count("max-corpus-fragments"))
    index.maxFragments = values["max-corpus-fragments"].as<uint64_t>();
  return true;
}

bool readCompileOptions(const char *command, const po::variables_map &values,
                        llvm::StringRef programPath,
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

  retrieval::IndexOptions &index = options.passes.corpusIndex;
  if (!readFileAccessOptions(command, values, index))
    return false;
  options.setReadPolicy(support::ReadPolicy::forProgram(
      programPath, index.readPolicy.roots, index.readPolicy.maxFileBytes));
  return true;
}

} // namespace spanc::cli
