//===- Names.h - Seeded person names for planted facts and needles --------===//
//
// Real, ordinary first and last names: a small model copies them far more
// reliably than invented ones, and none is a word of RandomText's hay, so
// a name in an answer can only have come from where it was planted.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_COMMON_NAMES_H
#define SPANC_BENCH_COMMON_NAMES_H

#include <random>
#include <string>
#include <vector>

namespace spanc::bench {

/// How many distinct names personNames() can give at most.
size_t maxDistinctNames();

/// `count` "First Last" names, no first or last name used twice, drawn
/// from `random`. `count` must not exceed maxDistinctNames().
std::vector<std::string> personNames(std::mt19937_64 &random, size_t count);

} // namespace spanc::bench

#endif // SPANC_BENCH_COMMON_NAMES_H
