//===- CompileOptions.h - The compile options the subcommands share -------===//
//
// `compile`, `opt` and `run` all compile through codegen/CompilePipeline;
// this reads what they spell the same way (--set, --tree-reduce,
// --prepare-fragments, --skip-pass, --max-calls, where the subcommand has
// them) into its options, once.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_COMPILEOPTIONS_H
#define SPANC_TOOLS_SPANC_COMPILEOPTIONS_H

#include "codegen/CompilePipeline.h"

#include <boost/program_options.hpp>

namespace spanc::cli {

/// Fills `options` from `values`; returns false after reporting a bad value
/// as "spanc COMMAND: error: ...".
bool readCompileOptions(const char *command,
                        const boost::program_options::variables_map &values,
                        codegen::CompileOptions &options);

/// Adds --max-calls (compile and run lower programs to plans).
void addMaxCallsOption(boost::program_options::options_description &options);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_COMPILEOPTIONS_H
