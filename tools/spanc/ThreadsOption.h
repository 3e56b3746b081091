//===- ThreadsOption.h - -t/--threads, bounded, for every subcommand ------===//
//
// `run`, `generate` and `bench` run OpenMP kernels; -t sets their thread
// count. More threads than the hardware runs at once only take turns on
// its cores (thousands of them also crashed libgomp), so the count is
// bounded by a small multiple of the hardware threads this process may
// use, and the help says the bound.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_THREADSOPTION_H
#define SPANC_TOOLS_SPANC_THREADSOPTION_H

#include <boost/program_options.hpp>

namespace spanc::cli {

/// -t/--threads may ask for at most this many threads per hardware thread.
constexpr int kThreadsPerHardwareThread = 4;

/// The most threads -t accepts here: kThreadsPerHardwareThread times the
/// hardware threads this process may run on (its CPU affinity).
int maxThreads();

/// Adds -t/--threads, with its bound in the help.
void addThreadsOption(boost::program_options::options_description &options);

/// Applies -t when it was given; returns false after reporting a count
/// outside [1, maxThreads()] as "spanc COMMAND: error: ...".
bool applyThreadsOption(const char *command,
                        const boost::program_options::variables_map &values);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_THREADSOPTION_H
