//===- ServeHog.h - spanc bench serve's hog cell ---------------*- C++ -*-===//
//
// The hog + short request cell, and what it shares with the other cells
// of bench/serve/ServeBench.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_SERVE_SERVEHOG_H
#define SPANC_BENCH_SERVE_SERVEHOG_H

#include "bench/common/Bench.h"

#include "llvm/Support/Error.h"

#include <ctime>
#include <string>

namespace spanc::bench {

/// How long a serve cell waits for an answer: a long answer on a loaded
/// machine takes minutes, not hours.
constexpr time_t kRequestTimeoutSeconds = 900;

/// Milliseconds as the serve tables print them (whole).
std::string formatMs(double value);

/// This process's own binary: the `spanc serve` the serve cells start.
std::string spancBinary();

/// `spanc bench serve --set cells=hog`: a short request's TTFT p50/p99 on
/// an idle server and beside a hog; writes serve-hog.md/.tsv/.png.
llvm::Error runHog(const BenchArgs &args);

} // namespace spanc::bench

#endif // SPANC_BENCH_SERVE_SERVEHOG_H
