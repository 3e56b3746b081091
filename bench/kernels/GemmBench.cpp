//===- GemmBench.cpp - spanc's AMX GEMM beside oneDNN's matmul ------------===//
//
// The prefill GEMMs of SmolLM2-135M (M tokens x the qkv, attn-out, gate|up
// and down weights) through both GemmEngine kernels on the same random
// weights, alternating repetitions so that both see the same machine, and
// the largest difference between their outputs. Prints a markdown table.
//
//   gemm_bench [M] [repetitions] [threads]     (defaults 512 20 2)
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Gemm.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace spanc::cpu;

namespace {

struct Shape {
  const char *name;
  int64_t n, k;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int fail(llvm::Error error) {
  std::fprintf(stderr, "gemm_bench: %s\n",
               llvm::toString(std::move(error)).c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  const int64_t m = argc > 1 ? std::atol(argv[1]) : 512;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 20;
  if (argc > 3)
    omp_set_num_threads(std::atoi(argv[3]));
  const Shape shapes[] = {{"qkv", 960, 576},
                          {"attn-out", 576, 576},
                          {"gate|up", 3072, 576},
                          {"down", 576, 1536}};
  GemmEngine amx(GemmPrecision::Bf16, GemmKernel::Amx);
  GemmEngine onednn(GemmPrecision::Bf16, GemmKernel::OneDnn);
  if (amx.kernel() != GemmKernel::Amx) {
    std::fprintf(stderr, "gemm_bench: this CPU cannot run AMX bf16\n");
    return 1;
  }
  std::printf("M = %lld, %d threads, %d repetitions (median)\n\n", (long long)m,
              omp_get_max_threads(), repetitions);
  std::printf(
      "| gemm | N x K | amx ms | TFLOP/s | oneDNN ms | TFLOP/s | "
      "oneDNN / amx | max |diff| |\n|---|---|---|---|---|---|---|---|\n");
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape &shape : shapes) {
    std::vector<float> w(size_t(shape.n * shape.k)), x(size_t(m * shape.k));
    for (float &value : w)
      value = normal(random) * 0.05f;
    for (float &value : x)
      value = normal(random);
    auto amxWeights = amx.packWeights(w.data(), shape.n, shape.k);
    if (!amxWeights)
      return fail(amxWeights.takeError());
    auto onednnWeights = onednn.packWeights(w.data(), shape.n, shape.k);
    if (!onednnWeights)
      return fail(onednnWeights.takeError());
    std::vector<float> yAmx(size_t(m * shape.n)), yOnednn(yAmx.size());
    std::vector<double> amxSeconds, onednnSeconds;
    for (int repetition = -2; repetition < repetitions; ++repetition) {
      auto start = std::chrono::steady_clock::now();
      if (llvm::Error error =
              amx.multiply(*amxWeights, x.data(), m, yAmx.data()))
        return fail(std::move(error));
      auto middle = std::chrono::steady_clock::now();
      if (llvm::Error error =
              onednn.multiply(*onednnWeights, x.data(), m, yOnednn.data()))
        return fail(std::move(error));
      auto end = std::chrono::steady_clock::now();
      if (repetition < 0)
        continue; // warm-up
      amxSeconds.push_back(
          std::chrono::duration<double>(middle - start).count());
      onednnSeconds.push_back(
          std::chrono::duration<double>(end - middle).count());
    }
    float maxDiff = 0;
    for (size_t index = 0; index < yAmx.size(); ++index)
      maxDiff = std::max(maxDiff, std::fabs(yAmx[index] - yOnednn[index]));
    const double flops = 2.0 * double(m) * double(shape.n) * double(shape.k);
    const double amxMs = median(amxSeconds) * 1e3;
    const double onednnMs = median(onednnSeconds) * 1e3;
    std::printf(
        "| %s | %lld x %lld | %.3f | %.2f | %.3f | %.2f | %.2fx | %.2g |\n",
        shape.name, (long long)shape.n, (long long)shape.k, amxMs,
        flops / amxMs * 1e-9, onednnMs, flops / onednnMs * 1e-9,
        onednnMs / amxMs, maxDiff);
  }
  return 0;
}
