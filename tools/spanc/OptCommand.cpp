//===- OptCommand.cpp - spanc opt -----------------------------------------===//

#include "codegen/CompilePipeline.h"
#include "ir/Printer.h"
#include "passes/PassManager.h"
#include "tools/spanc/CommandLine.h"
#include "tools/spanc/CompileOptions.h"
#include "tools/spanc/Interrupt.h"
#include "tools/spanc/LimitsHelp.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

int runOpt(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                      //
      ("input", po::value<std::string>()->required(),                        //
       "a .ir file (or a .span program or spnl .json query)")                //
      ("passes", po::value<std::string>(),                                   //
       "comma-separated passes to run in order; without --passes the "       //
       "default pipeline runs; --passes= (empty) only parses, verifies "     //
       "and prints")                                                         //
      ("print-ir-after-all", "print the IR to stderr after every pass")      //
      ("print-ir-after", po::value<std::vector<std::string>>()->composing(), //
       "NAME: print the IR to stderr after pass NAME (repeatable)")          //
      ("output,o", po::value<std::string>(),                                 //
       "write the output here instead of stdout")                            //
      ("set", po::value<std::vector<std::string>>()->composing(),            //
       "NAME=VALUE: override `param NAME` of a .span input")                 //
      ("print-loc", "print each op's source location as loc(...)")           //
      ("stats", "print to stderr how many rewrites each pattern-driven "     //
                "pass made")                                                 //
      ("tree-reduce", po::value<int64_t>()->default_value(0),                //
       "fan-in for tree-reduce on gens without reduce= (0: off)")            //
      ("prepare-fragments",                                                  //
       "desugar-retrieve adds a max_tokens=1 warm-up gen per fragment");
  addFileAccessOptions(options);
  po::positional_options_description positional;
  positional.add("input", 1);
  std::string about =
      "Runs optimizer passes over span IR and prints the result. The IR is\n"
      "verified after every pass; a pass that leaves ill-formed IR is named.\n"
      "IR dumps (--print-ir-after*) go to stderr, the result to stdout.\n\n" +
      passes::describePasses() + "\n" + limitsHelp(NestingLimit | FilesLimit);
  // Boost rejects "--passes=" (an empty value after '='), which is how the
  // design spells "no passes": hand it over as a separate empty value.
  std::vector<std::string> arguments;
  for (const std::string &arg : args) {
    if (arg == "--passes=") {
      arguments.push_back("--passes");
      arguments.push_back("");
    } else {
      arguments.push_back(arg);
    }
  }
  ParsedCommandLine parsed = parseCommandLine(
      "opt",
      "spanc opt FILE.ir [--passes=a,b] [--print-ir-after-all] "
      "[--print-ir-after=NAME] [-o OUT]",
      about.c_str(), options, positional, arguments);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  codegen::CompileOptions compileOptions;
  if (!readCompileOptions("opt", values, values["input"].as<std::string>(),
                          compileOptions))
    return 1;
  if (values.count("passes"))
    compileOptions.pipeline = values["passes"].as<std::string>();
  compileOptions.printAfterAll = values.count("print-ir-after-all") != 0;
  if (values.count("print-ir-after"))
    compileOptions.printAfter =
        values["print-ir-after"].as<std::vector<std::string>>();
  compileOptions.printOptions.printLocations = values.count("print-loc") != 0;
  compileOptions.printStatistics = values.count("stats") != 0;
  deferInterrupts();
  compileOptions.passes.stopRequested = interruptRequested;

  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  // Pipeline problems are reported before reading the input.
  auto optimizer = codegen::Optimizer::create(diagnostics, compileOptions);
  if (!optimizer)
    return reportError("opt", llvm::toString(optimizer.takeError()));
  std::unique_ptr<ir::Module> module = codegen::loadSource(
      values["input"].as<std::string>(), diagnostics, compileOptions);
  if (!module)
    return 1;
  llvm::Error error = (*optimizer)->run(*module);
  if (interruptRequested()) {
    llvm::consumeError(std::move(error));
    return reportInterrupted("opt", "nothing was written");
  }
  if (error)
    return reportError("opt", llvm::toString(std::move(error)));

  return writeOutput("opt", values,
                     ir::toString(*module, compileOptions.printOptions));
}

} // namespace spanc::cli
