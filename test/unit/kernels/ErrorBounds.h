//===- ErrorBounds.h - Rounding-error constants the kernel tests share ----===//
//
// The vocabulary the kernel tests derive their tolerances from (the model is
// AttentionTest.cpp's): unit roundoffs of the formats the kernels round to,
// and Higham and Mary's probabilistic bound for sums. A test's bound names
// the roundings its kernel does on each path and adds them up with these.
//
//===----------------------------------------------------------------------===//

#ifndef SPANC_TEST_UNIT_KERNELS_ERRORBOUNDS_H
#define SPANC_TEST_UNIT_KERNELS_ERRORBOUNDS_H

#include <cmath>
#include <cstdint>

namespace spanc::test {

/// The unit roundoff of f32 (round to nearest: half an ulp of 1).
constexpr double kUnitRoundoff = 0x1p-24;
/// The unit roundoff of double (references and angles computed in double).
constexpr double kDoubleRoundoff = 0x1p-53;
/// The unit roundoff of f16 (10 stored significand bits).
constexpr double kHalfRoundoff = 0x1p-11;
/// The unit roundoff of bf16: 8 significant bits (7 stored), so rounding to
/// nearest moves a value by at most 2^-8 of it (1.00390625 -> 1: 2^-8).
constexpr double kBf16Roundoff = 0x1p-8;

/// The probabilistic rounding-error bound of a sum of n terms is
/// lambda * sqrt(n) * u * sum |terms| (Higham and Mary, SIAM J. Sci. Comput.
/// 41(5), 2019), holding with probability at least 1 - 2 exp(-lambda^2/2)
/// per sum: 1 - 2.5e-14 at lambda = 8. It assumes only that the roundings
/// are independent and mean-zero, as round to nearest gives on random data;
/// the worst case (n * u) is never reached that way and would hide bugs.
constexpr double kLambda = 8;

/// The relative error bound of an f32 sum of `terms` terms (in any order or
/// tree), against the sum of their absolute values.
inline double f32SumError(int64_t terms) {
  return kLambda * std::sqrt(double(terms)) * kUnitRoundoff;
}

/// |actual - expected| as a share of `bound` (1 at the bound; 0 for an
/// exact result, infinity for an inexact one held to 0): what the tests
/// print per path, so that a host's margin shows in its log.
inline double errorRatio(double actual, double expected, double bound) {
  const double error = std::abs(actual - expected);
  if (error == 0)
    return 0;
  return bound > 0 ? error / bound : INFINITY;
}

} // namespace spanc::test

#endif // SPANC_TEST_UNIT_KERNELS_ERRORBOUNDS_H
