//===- LimitsHelp.cpp - The limits paragraph of spanc's help texts --------===//

#include "tools/spanc/LimitsHelp.h"

#include "codegen/Lowering.h"
#include "frontend/SyntaxTree.h"
#include "ir/IR.h"
#include "tools/spanc/ThreadsOption.h"

namespace spanc::cli {

std::string limitsHelp(unsigned lines) {
  std::string text = "Limits (each an error that says where, found before "
                     "any model runs):\n";
  if (lines & CallsLimit)
    text += "  calls    a program makes at most " +
            std::to_string(codegen::kDefaultMaxCalls) +
            " model calls and its repeats\n"
            "           expand to at most as many samples in all; "
            "--max-calls N raises both\n";
  if (lines & NestingLimit)
    text += "  nesting  ops nest at most " +
            std::to_string(ir::kMaxNestingDepth) +
            " levels deep (lets inlined), braces at most\n"
            "           " +
            std::to_string(frontend::SyntaxTree::kMaxNesting) +
            "; fixed (the compiler recurses once per level)\n";
  if (lines & PromptLimit)
    text += "  prompt   each call's prompt plus its max_tokens must fit the "
            "model's context\n"
            "           ('spanc model info' shows it): lower max_tokens or "
            "shorten the\n"
            "           prompt (outputs spliced into a prompt are checked "
            "when it runs)\n";
  if (lines & ThreadsLimit)
    text += "  threads  -t is at most " +
            std::to_string(kThreadsPerHardwareThread) +
            " per hardware thread this process may use (" +
            std::to_string(maxThreads()) +
            " here)\n"
            "           (OMP_NUM_THREADS too, without -t)\n";
  if (lines & FilesLimit)
    text += "  files    file() and retrieve read the program's folder and "
            "what --allow-read\n"
            "           allows\n";
  return text;
}

} // namespace spanc::cli
