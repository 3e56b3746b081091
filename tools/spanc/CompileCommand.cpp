//===- CompileCommand.cpp - spanc compile ---------------------------------===//

#include "frontend/Load.h"
#include "frontend/SyntaxTree.h"
#include "ir/Printer.h"
#include "passes/PassManager.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

namespace {

/// Writes `text` to `-o PATH` or stdout; returns the exit code.
int writeOutput(const po::variables_map &values, const std::string &text) {
  if (!values.count("output") || values["output"].as<std::string>() == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    return 0;
  }
  std::string path = values["output"].as<std::string>();
  std::error_code error;
  llvm::raw_fd_ostream out(path, error, llvm::sys::fs::OF_Text);
  if (error)
    return reportError("compile",
                       "cannot write '" + path + "': " + error.message());
  out << text;
  return 0;
}

} // namespace

int runCompile(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                   //
      ("input", po::value<std::string>()->required(),                     //
       "a .span program, an spnl .json query or a .ir file")              //
      ("emit", po::value<std::string>()->default_value("ast"),            //
       "what to print: ast (the parse tree of a .span program), ir (the " //
       "verified IR), ir-opt (the IR after the default pipeline; see "    //
       "'spanc opt --help'); plan comes with lowering (issue #6)")        //
      ("set", po::value<std::vector<std::string>>()->composing(),         //
       "NAME=VALUE: override `param NAME` (repeatable; the value is "     //
       "typed by the param's literal)")                                   //
      ("output,o", po::value<std::string>(),                              //
       "write the output here instead of stdout")                         //
      ("print-loc", "print each op's source location as loc(...)")        //
      ("tree-reduce", po::value<unsigned>()->default_value(0),            //
       "with --emit=ir-opt: tree-reduce gens over wide plus with this "   //
       "fan-in (0: only gens with reduce=)")                              //
      ("prepare-fragments",                                               //
       "with --emit=ir-opt: desugar-retrieve adds cache warm-up calls");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "compile",
      "spanc compile FILE [--emit=ast|ir|ir-opt] [--set N=V] [-o OUT]",
      "Compiles a span program (.span), an spnl JSON query (.json) or span\n"
      "IR (.ir) and prints what --emit asks for. Errors are reported as\n"
      "file:line:col with the source line and a caret; all errors of a file\n"
      "are reported, and the exit code is then 1.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  std::string path = values["input"].as<std::string>();
  std::string emit = values["emit"].as<std::string>();
  if (emit == "plan")
    return notYetImplemented("compile --emit=plan", "#6 (lowering to a plan)");
  if (emit != "ast" && emit != "ir" && emit != "ir-opt")
    return reportError("compile", "unknown --emit=" + emit +
                                      " (expected ast, ir, ir-opt or plan)");

  frontend::FrontendOptions frontendOptions;
  if (values.count("set"))
    for (const std::string &text :
         values["set"].as<std::vector<std::string>>()) {
      std::pair<std::string, std::string> override;
      if (!frontend::parseParamOverride(text, override))
        return reportError("compile",
                           "--set takes NAME=VALUE, got '" + text + "'");
      frontendOptions.paramOverrides.push_back(std::move(override));
    }

  llvm::SourceMgr sourceMgr;
  if (emit == "ast") {
    if (frontend::inputKindForPath(path) != frontend::InputKind::Span)
      return reportError("compile", "--emit=ast needs a .span program");
    auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
    if (!buffer)
      return reportError("compile", "cannot read '" + path +
                                        "': " + buffer.getError().message());
    unsigned bufferId =
        sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
    auto tree = frontend::SyntaxTree::parse(sourceMgr, bufferId);
    if (tree->numSyntaxErrors())
      return 1;
    return writeOutput(values, tree->toStringTree() + "\n");
  }

  ir::DiagnosticEngine diagnostics(sourceMgr);
  std::unique_ptr<ir::Module> module =
      frontend::loadModule(path, diagnostics, frontendOptions);
  if (!module)
    return 1;
  if (emit == "ir-opt") {
    passes::PassOptions passOptions;
    passOptions.treeReduce = values["tree-reduce"].as<unsigned>();
    passOptions.prepareFragments = values.count("prepare-fragments") != 0;
    passes::PassContext context(diagnostics, passOptions);
    passes::PassManager manager(context);
    manager.addDefaultPipeline();
    if (llvm::Error error = manager.run(*module))
      return reportError("compile", llvm::toString(std::move(error)));
  }
  ir::PrintOptions printOptions;
  printOptions.printLocations = values.count("print-loc") != 0;
  return writeOutput(values, ir::toString(*module, printOptions));
}

} // namespace spanc::cli
