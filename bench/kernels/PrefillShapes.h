//===- PrefillShapes.h - SmolLM2's prompt GEMMs for the kernel benches ---===//
//
// The four weight products of a SmolLM2-135M layer (N outputs x K inputs)
// that gemm_bench and quant_gemm_bench time at M prompt rows, and the
// median they report.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_KERNELS_PREFILLSHAPES_H
#define SPANC_BENCH_KERNELS_PREFILLSHAPES_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace spanc::bench {

struct PrefillShape {
  const char *name;
  int64_t n, k;
};

inline constexpr PrefillShape kPrefillShapes[] = {{"qkv", 960, 576},
                                                  {"attn-out", 576, 576},
                                                  {"gate|up", 3072, 576},
                                                  {"down", 576, 1536}};

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

} // namespace spanc::bench

#endif // SPANC_BENCH_KERNELS_PREFILLSHAPES_H
