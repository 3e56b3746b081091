//===- LimitsHelp.h - The limits paragraph of spanc's help texts ----------===//
//
// `spanc --help` and each subcommand's help say which bounds apply to what
// it reads and runs, and how to raise them; the text is written once, from
// the constants that define the bounds, so that it cannot drift from them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_LIMITSHELP_H
#define SPANC_TOOLS_SPANC_LIMITSHELP_H

#include <string>

namespace spanc::cli {

/// The lines of the paragraph, to combine with |.
enum LimitLine : unsigned {
  CallsLimit = 1,   ///< --max-calls: model calls and repeat samples
  NestingLimit = 2, ///< how deep a program's ops nest
  PromptLimit = 4,  ///< a call's prompt and max_tokens against the context
  ThreadsLimit = 8, ///< -t/--threads
  FilesLimit = 16,  ///< what file() and retrieve may read
  AllLimits = 31,
};

/// "Limits (...):" and one entry per line asked for, ready for a help text.
std::string limitsHelp(unsigned lines);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_LIMITSHELP_H
