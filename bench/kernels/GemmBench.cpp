//===- GemmBench.cpp - spanc's panel GEMMs beside oneDNN's matmul ---------===//
//
// The prefill GEMMs of SmolLM2-135M (M tokens x the qkv, attn-out, gate|up
// and down weights) on the same random Q4_1 weights three ways: spanc's
// panel kernel (AMX tiles, or AVX-512 BF16 where the CPU has no AMX) on a
// bf16 copy, the same kernel borrowing the Q4_1 tiles
// (GemmEngine::borrowQuantized: unpacked per call; its outputs must equal
// the copy's bit for bit) and oneDNN's matmul, alternating repetitions so
// that all see the same machine, and the largest difference between the
// kernel's and oneDNN's outputs. Prints a markdown table.
//
//   gemm_bench [M] [repetitions] [threads] [amx|avx512bf16]
//                                          (defaults 512 20 2, the CPU's)
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/PrefillShapes.h"
#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/Gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

using namespace spanc::cpu;
using spanc::bench::kPrefillShapes;
using spanc::bench::median;
using spanc::bench::PrefillShape;

namespace {

/// Quantizes w[n][k] to GGUF Q4_1 blocks (d = (max - min) / 15, m = min,
/// in f16) and replaces w by the blocks' dequantized values, so that every
/// engine multiplies the same weights.
std::vector<uint8_t> quantizeQ4_1(std::vector<float> &w, int64_t n, int64_t k) {
  std::vector<uint8_t> bytes(size_t(n * k / 32 * 20));
  for (int64_t block = 0; block < n * k / 32; ++block) {
    float *values = w.data() + block * 32;
    uint8_t *out = bytes.data() + block * 20;
    const float low = *std::min_element(values, values + 32);
    const float high = *std::max_element(values, values + 32);
    const uint16_t dBits = _cvtss_sh((high - low) / 15, 0);
    const uint16_t mBits = _cvtss_sh(low, 0);
    std::memcpy(out, &dBits, 2);
    std::memcpy(out + 2, &mBits, 2);
    const float d = _cvtsh_ss(dBits), m = _cvtsh_ss(mBits);
    std::memset(out + 4, 0, 16);
    for (int i = 0; i < 32; ++i) {
      const int q = std::clamp(int(std::lround((values[i] - m) / d)), 0, 15);
      out[4 + i % 16] |= uint8_t(q << (i < 16 ? 0 : 4));
      values[i] = float(q) * d + m;
    }
  }
  return bytes;
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
  std::optional<GemmKernel> wanted =
      parseGemmKernel(argc > 4 ? argv[4] : "amx");
  GemmEngine amx(GemmPrecision::Bf16, wanted.value_or(GemmKernel::OneDnn));
  GemmEngine onednn(GemmPrecision::Bf16, GemmKernel::OneDnn);
  if (!usesPanels(amx.kernel()) || (argc > 4 && amx.kernel() != *wanted)) {
    std::fprintf(stderr, "gemm_bench: this CPU cannot run %s\n",
                 argc > 4 ? argv[4] : "a bf16 panel kernel (amx, avx512bf16)");
    return 1;
  }
  const char *kernel = gemmKernelName(amx.kernel());
  std::printf("M = %lld, %d threads, %d repetitions (median), kernel %s\n\n",
              (long long)m, omp_get_max_threads(), repetitions, kernel);
  std::printf("| gemm | N x K | %s ms | TFLOP/s | borrowed Q4_1 ms | TFLOP/s "
              "| borrowed / %s | oneDNN ms | TFLOP/s | oneDNN / %s | max "
              "|diff| |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
              kernel, kernel, kernel);
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const PrefillShape &shape : kPrefillShapes) {
    std::vector<float> w(size_t(shape.n * shape.k)), x(size_t(m * shape.k));
    for (float &value : w)
      value = normal(random) * 0.05f;
    for (float &value : x)
      value = normal(random);
    std::vector<uint8_t> blocks = quantizeQ4_1(w, shape.n, shape.k);
    PackedQuantMatrix quantized =
        packQuantMatrix({QuantFormat::Q4_1, blocks.data(), shape.n, shape.k,
                         shape.k / 32 * 20});
    GemmWeights borrowed = amx.borrowQuantized(quantized, false);
    auto amxWeights = amx.packWeights(w.data(), shape.n, shape.k);
    if (!amxWeights)
      return fail(amxWeights.takeError());
    auto onednnWeights = onednn.packWeights(w.data(), shape.n, shape.k);
    if (!onednnWeights)
      return fail(onednnWeights.takeError());
    std::vector<float, AlignedAllocator<float>> yAmx(size_t(m * shape.n)),
        yOnednn(yAmx.size()), yBorrowed(yAmx.size());
    std::vector<double> amxSeconds, borrowedSeconds, onednnSeconds;
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
      if (llvm::Error error =
              amx.multiply(borrowed, x.data(), m, yBorrowed.data()))
        return fail(std::move(error));
      auto last = std::chrono::steady_clock::now();
      if (repetition < 0)
        continue; // warm-up
      borrowedSeconds.push_back(
          std::chrono::duration<double>(last - end).count());
      amxSeconds.push_back(
          std::chrono::duration<double>(middle - start).count());
      onednnSeconds.push_back(
          std::chrono::duration<double>(end - middle).count());
    }
    if (yBorrowed != yAmx) {
      std::fprintf(stderr,
                   "gemm_bench: %s: borrowed and copied weights "
                   "disagree\n",
                   shape.name);
      return 1;
    }
    float maxDiff = 0;
    for (size_t index = 0; index < yAmx.size(); ++index)
      maxDiff = std::max(maxDiff, std::fabs(yAmx[index] - yOnednn[index]));
    const double flops = 2.0 * double(m) * double(shape.n) * double(shape.k);
    const double amxMs = median(amxSeconds) * 1e3;
    const double borrowedMs = median(borrowedSeconds) * 1e3;
    const double onednnMs = median(onednnSeconds) * 1e3;
    std::printf("| %s | %lld x %lld | %.3f | %.2f | %.3f | %.2f | %.2fx | "
                "%.3f | %.2f | %.2fx | %.2g |\n",
                shape.name, (long long)shape.n, (long long)shape.k, amxMs,
                flops / amxMs * 1e-9, borrowedMs, flops / borrowedMs * 1e-9,
                borrowedMs / amxMs, onednnMs, flops / onednnMs * 1e-9,
                onednnMs / amxMs, maxDiff);
  }
  return 0;
}
