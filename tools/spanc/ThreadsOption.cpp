//===- ThreadsOption.cpp - -t/--threads, bounded, for every subcommand ----===//

#include "tools/spanc/ThreadsOption.h"

#include "tools/spanc/CommandLine.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace spanc::cli {

int maxThreads() {
  return kThreadsPerHardwareThread * std::max(1, omp_get_num_procs());
}

void addThreadsOption(po::options_description &options) {
  static const std::string help =
      "CPU threads (default: one per hardware thread); at most " +
      std::to_string(kThreadsPerHardwareThread) +
      " per hardware thread this process may use (" +
      std::to_string(maxThreads()) + " here)";
  options.add_options()("threads,t", po::value<int>(), help.c_str());
}

bool applyThreadsOption(const char *command, const po::variables_map &values) {
  if (!values.count("threads")) {
    // Without -t, OpenMP takes OMP_NUM_THREADS as it is: the same bound.
    const char *environment = std::getenv("OMP_NUM_THREADS");
    if (environment && omp_get_max_threads() > maxThreads()) {
      reportError(command,
                  "OMP_NUM_THREADS=" + std::string(environment) + " asks for " +
                      std::to_string(omp_get_max_threads()) +
                      " threads; at most " + std::to_string(maxThreads()) +
                      " here (" + std::to_string(kThreadsPerHardwareThread) +
                      " per hardware thread this process may use): set it " +
                      "lower or pass -t");
      return false;
    }
    return true;
  }
  int threads = values["threads"].as<int>();
  if (threads < 1 || threads > maxThreads()) {
    reportError(command,
                "--threads " + std::to_string(threads) + ": must be in [1, " +
                    std::to_string(maxThreads()) + "] (" +
                    std::to_string(kThreadsPerHardwareThread) + " per " +
                    "hardware thread this process may use; more only take " +
                    "turns on the cores)");
    return false;
  }
  omp_set_num_threads(threads);
  return true;
}

} // namespace spanc::cli
