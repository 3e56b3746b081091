//===- CompileOptions.h - The compile options the subcommands share -------===//
//
// `compile`, `opt` and `run` all compile through codegen/CompilePipeline;
// this reads what they spell the same way (--set, --tree-reduce,
// --prepare-fragments, --skip-pass, --max-calls, where the subcommand has
// them, and the file access options every one of them has) into its
// options, once.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_COMPILEOPTIONS_H
#define SPANC_TOOLS_SPANC_COMPILEOPTIONS_H

#include "codegen/CompilePipeline.h"

#include <boost/program_options.hpp>

namespace spanc::cli {

/// Adds what a program may read (--allow-read, --max-file-size) and where
/// corpus indexes go and how large they may grow (--index-dir,
/// --max-corpus-fragments): every subcommand that evaluates file("...")
/// or retrieve has them, and so has `spanc index`.
void addFileAccessOptions(boost::program_options::options_description &options);

/// Fills `options` from `values`; returns false after reporting a bad value
/// as "spanc COMMAND: error: ...". `programPath` (a file, "-" for standard
/// input, or the folder of a bulk) is what file("...") and corpora may read
/// beside, with the --allow-read folders.
bool readCompileOptions(const char *command,
                        const boost::program_options::variables_map &values,
                        llvm::StringRef programPath,
                        codegen::CompileOptions &options);

/// Adds --max-calls (compile and run lower programs to plans).
void addMaxCallsOption(boost::program_options::options_description &options);

/// Reads the options of addFileAccessOptions into `index` (its read policy
/// gets the --allow-read folders only; callers add the program's).
bool readFileAccessOptions(const char *command,
                           const boost::program_options::variables_map &values,
                           retrieval::IndexOptions &index);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_COMPILEOPTIONS_H
