//===- CompileCommand.cpp - spanc compile ---------------------------------===//

#include "frontend/SyntaxTree.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

int runCompile(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                   //
      ("input", po::value<std::string>()->required(),                     //
       "a .span program")                                                 //
      ("emit", po::value<std::string>()->default_value("ast"),            //
       "what to print: ast (the parse tree); ir, ir-opt and plan come "   //
       "with the IR (issue #3) and lowering (issue #6)");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "compile", "spanc compile FILE [--emit=ast]",
      "Parses a span program and prints what --emit asks for. Errors are\n"
      "reported as file:line:col with the source line and a caret.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;

  std::string path = parsed.values["input"].as<std::string>();
  std::string emit = parsed.values["emit"].as<std::string>();
  if (emit != "ast")
    return notYetImplemented(("compile --emit=" + emit).c_str(), "#3/#6");

  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer)
    return reportError("compile",
                       "cannot read '" + path + "': " + buffer.getError().message());
  llvm::SourceMgr sourceMgr;
  unsigned bufferId =
      sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  auto tree = frontend::SyntaxTree::parse(sourceMgr, bufferId);
  if (tree->numSyntaxErrors())
    return 1;
  llvm::outs() << tree->toStringTree() << "\n";
  return 0;
}

} // namespace spanc::cli
