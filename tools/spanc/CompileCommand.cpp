//===- CompileCommand.cpp - spanc compile ---------------------------------===//

#include "codegen/CompilePipeline.h"
#include "codegen/Lowering.h"
#include "frontend/Load.h"
#include "frontend/SyntaxTree.h"
#include "ir/Printer.h"
#include "plan/PlanPrinter.h"
#include "runtime/kernels/Limits.h"
#include "runtime/kv/KvCacheManager.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/ModelIdentity.h"
#include "runtime/model/Tokenizer.h"
#include "tools/spanc/CommandLine.h"
#include "tools/spanc/CompileOptions.h"
#include "tools/spanc/Interrupt.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/SpanModeOptions.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace spanc::cli {

namespace {

/// Lowers the optimized `module` through the chat template of the model at
/// `--model` and prints the plan; returns the exit code.
int emitPlan(const po::variables_map &values, const ir::Module &module,
             ir::DiagnosticEngine &diagnostics,
             codegen::LoweringLimits limits) {
  plan::PlanPrintOptions printOptions;
  // The layout shown is the runtime's, so the block size is bounded alike.
  std::optional<int64_t> blockSize = readBoundedInt(
      "compile", values, "block-size", 1, kernels::kMaxBlockSize);
  if (!blockSize)
    return 1;
  printOptions.blockSize = unsigned(*blockSize);
  auto cacheMode = kv::parseCacheMode(values["cache"].as<std::string>());
  if (!cacheMode)
    return reportError("compile", llvm::toString(cacheMode.takeError()));
  printOptions.printTokens = values.count("print-tokens") != 0;
  auto spanOptions = readSpanModeOptions(values);
  if (!spanOptions)
    return reportError("compile", llvm::toString(spanOptions.takeError()));

  // Only the tokenizer and the chat template: the file is mapped, and its
  // tensor data is never loaded.
  std::string modelPath = values.count("model")
                              ? values["model"].as<std::string>()
                              : defaultModelPath();
  auto file = model::GgufFile::open(modelPath);
  if (!file)
    return reportError("compile", "cannot open model '" + modelPath +
                                      "': " + llvm::toString(file.takeError()) +
                                      " (tools/setup.sh installs the default)");
  auto tokenizer = model::Tokenizer::fromGguf(**file);
  if (!tokenizer)
    return reportError("compile", llvm::toString(tokenizer.takeError()));
  auto chatTemplate = model::ChatTemplate::fromGguf(**file, **tokenizer);
  if (!chatTemplate)
    return reportError("compile", llvm::toString(chatTemplate.takeError()));
  model::ChatTemplateEncoder encoder(*chatTemplate, **tokenizer);
  // Prompts are checked against the model's context when the file says
  // what it is (a tokenizer-only file does not).
  limits.contextLength = model::declaredContextLength(**file).value_or(0);
  std::optional<plan::Plan> plan =
      codegen::lowerToPlan(module, encoder, diagnostics, limits);
  if (!plan)
    return 1;

  std::string text;
  llvm::raw_string_ostream os(text);
  kv::BlockHasher hasher(model::modelIdentity(**file));
  plan::printPlan(
      *plan, printOptions,
      [&](const plan::Call &, llvm::ArrayRef<kv::Segment> segments,
          llvm::raw_ostream &out) {
        kv::printCallLayout(segments, hasher, *cacheMode, *spanOptions,
                            printOptions.blockSize, out);
      },
      os);
  os.flush();
  return writeOutput("compile", values, text);
}

} // namespace

int runCompile(const std::vector<std::string> &args) {
  po::options_description options("Options");
  const std::string blockSizeHelp =
      "with --emit=plan: tokens per KV cache block, in [1, " +
      std::to_string(kernels::kMaxBlockSize) + "] as for 'spanc run'";
  options.add_options()                                                    //
      ("input", po::value<std::string>()->required(),                      //
       "a .span program, an spnl .json query or a .ir file")               //
      ("emit", po::value<std::string>()->default_value("ast"),             //
       "what to print: ast (the parse tree of a .span program), ir (the "  //
       "verified IR), ir-opt (the IR after the default pipeline; see "     //
       "'spanc opt --help'), plan (the model calls after the default "     //
       "pipeline, lowered through --model's chat template)")               //
      ("set", po::value<std::vector<std::string>>()->composing(),          //
       "NAME=VALUE: override `param NAME` (repeatable; the value is "      //
       "typed by the param's literal)")                                    //
      ("output,o", po::value<std::string>(),                               //
       "write the output here instead of stdout")                          //
      ("print-loc", "print each op's source location as loc(...)")         //
      ("tree-reduce", po::value<int64_t>()->default_value(0),              //
       "with --emit=ir-opt or plan: tree-reduce gens over wide plus with " //
       "this fan-in (0: only gens with reduce=)")                          //
      ("prepare-fragments",                                                //
       "with --emit=ir-opt or plan: desugar-retrieve adds cache warm-up "  //
       "calls")                                                            //
      ("model", po::value<std::string>(),                                  //
       "with --emit=plan: the GGUF whose tokenizer and chat template "     //
       "lower the program (its weights are not loaded; default: "          //
       "$SPANC_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf)")          //
      ("block-size", po::value<int64_t>()->default_value(16),              //
       blockSizeHelp.c_str())                                              //
      ("cache", po::value<std::string>()->default_value("span"),           //
       "with --emit=plan: the KV cache mode the layout is shown for: "     //
       "span (spans hash from the root), prefix (one causal chain), off")  //
      ("print-tokens", "with --emit=plan: print every token id")           //
      ("verify-each",                                                      //
       "with --emit=ir-opt or plan: verify the IR after every pass (names "
       "the pass that broke it); by default it is verified once, after " //
       "the last pass");
  addSpanModeOptions(options);
  addMaxCallsOption(options);
  addFileAccessOptions(options);
  po::positional_options_description positional;
  positional.add("input", 1);
  const std::string about =
      "Compiles a span program (.span), an spnl JSON query (.json) or span\n"
      "IR (.ir) and prints what --emit asks for. Errors are reported as\n"
      "file:line:col with the source line and a caret; all errors of a file\n"
      "are reported, and the exit code is then 1.\n\n" +
      limitsHelp(CallsLimit | NestingLimit | PromptLimit | FilesLimit) +
      "(compile checks calls and prompts with --emit=plan, against --model's\n"
      "context)";
  ParsedCommandLine parsed = parseCommandLine(
      "compile",
      "spanc compile FILE [--emit=ast|ir|ir-opt|plan] [--set N=V] [-o OUT]",
      about.c_str(), options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  std::string path = values["input"].as<std::string>();
  std::string emit = values["emit"].as<std::string>();
  if (emit != "plan" && emit != "ast" && emit != "ir" && emit != "ir-opt")
    return reportError("compile", "unknown --emit=" + emit +
                                      " (expected ast, ir, ir-opt or plan)");

  codegen::CompileOptions compileOptions;
  if (!readCompileOptions("compile", values, path, compileOptions))
    return 1;
  // Verifying after each pass costs about as much as the passes on large
  // programs; the end result is verified either way.
  compileOptions.verifyEach = values.count("verify-each") != 0;
  deferInterrupts();
  compileOptions.passes.stopRequested = interruptRequested;

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
    return writeOutput("compile", values, tree->toStringTree() + "\n");
  }

  ir::DiagnosticEngine diagnostics(sourceMgr);
  std::unique_ptr<ir::Module> module =
      codegen::loadSource(path, diagnostics, compileOptions);
  if (!module)
    return 1;
  if (emit == "ir-opt" || emit == "plan") {
    auto optimizer = codegen::Optimizer::create(diagnostics, compileOptions);
    if (!optimizer)
      return reportError("compile", llvm::toString(optimizer.takeError()));
    llvm::Error error = (*optimizer)->run(*module);
    if (interruptRequested()) {
      llvm::consumeError(std::move(error));
      return reportInterrupted("compile", "nothing was written");
    }
    if (error)
      return reportError("compile", llvm::toString(std::move(error)));
  }
  if (emit == "plan")
    return emitPlan(values, *module, diagnostics, compileOptions.limits);
  ir::PrintOptions printOptions;
  printOptions.printLocations = values.count("print-loc") != 0;
  return writeOutput("compile", values, ir::toString(*module, printOptions));
}

} // namespace spanc::cli
