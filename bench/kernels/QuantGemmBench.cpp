//===- QuantGemmBench.cpp - Prompt GEMMs: int8 on 4-bit tiles vs f32 ------===//
//
// The prefill GEMMs of SmolLM2-135M (M tokens x the qkv, attn-out, gate|up
// and down weights, random Q4_1) two ways, alternating repetitions so that
// both see the same machine: the engine's f32 GEMM (spanc's f32 kernel
// below AVX-512, on the borrowed Q4_1 tiles; oneDNN's f32 matmul on a copy
// at AVX-512) and the int8 path (the rows quantized per block of 32, then
// QuantGemv on the same tiles: on AVX2, four rows at a time on unpacked
// tiles). The int8 outputs must equal the portable path's bit for bit.
// Prints a markdown table; run under SPANC_ISA=avx2 for what an AVX2 host
// runs.
//
//   quant_gemm_bench [M] [repetitions] [threads]   (defaults 512 20 2)
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/PrefillShapes.h"
#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace spanc::cpu;
using spanc::bench::kPrefillShapes;
using spanc::bench::median;
using spanc::bench::PrefillShape;

namespace {

/// n x k random Q4_1 blocks with small finite f16 scales and minimums.
std::vector<uint8_t> randomQ4_1(int64_t n, int64_t k, std::mt19937 &random) {
  std::vector<uint8_t> bytes(size_t(n * k / 32 * 20));
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t block = 0; block < bytes.size() / 20; ++block) {
    uint8_t *at = bytes.data() + block * 20;
    for (int i = 4; i < 20; ++i)
      at[i] = uint8_t(byte(random));
    const uint16_t scale = uint16_t(0x2000 + byte(random));   // ~2^-7
    const uint16_t minimum = uint16_t(0xa400 + byte(random)); // ~-2^-6
    std::memcpy(at, &scale, 2);
    std::memcpy(at + 2, &minimum, 2);
  }
  return bytes;
}

int fail(llvm::Error error) {
  std::fprintf(stderr, "quant_gemm_bench: %s\n",
               llvm::toString(std::move(error)).c_str());
  return 1;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

int main(int argc, char **argv) {
  const int64_t m = argc > 1 ? std::atol(argv[1]) : 512;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 20;
  if (argc > 3)
    omp_set_num_threads(std::atoi(argv[3]));
  if (m < 1 || repetitions < 1) {
    std::fprintf(stderr, "usage: %s [M] [repetitions] [threads]\n", argv[0]);
    return 2;
  }
  GemmEngine engine(GemmPrecision::F32, GemmKernel::Amx);
  std::printf("M = %lld, %d threads, %d repetitions (median), kernel path "
              "%s, f32 GEMM %s\n\n",
              (long long)m, omp_get_max_threads(), repetitions,
              isaLevelName(isaLevel()), gemmKernelName(engine.kernel()));
  std::printf("| gemm | N x K | f32 ms | GFLOP/s | int8 ms | GFLOP/s | of "
              "which quantizing ms | f32 / int8 | max |diff| / max |y| "
              "|\n|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double f32Total = 0, int8Total = 0;
  for (const PrefillShape &shape : kPrefillShapes) {
    std::vector<uint8_t> blocks = randomQ4_1(shape.n, shape.k, random);
    PackedQuantMatrix quantized =
        packQuantMatrix({QuantFormat::Q4_1, blocks.data(), shape.n, shape.k,
                         shape.k / 32 * 20});
    std::vector<float> x(size_t(m * shape.k));
    for (float &value : x)
      value = normal(random);
    GemmWeights weights;
    if (engine.canBorrowQuantized()) {
      weights = engine.borrowQuantized(quantized, false);
    } else {
      // The dequantized values, as the model packs them.
      std::vector<float> w(size_t(shape.n * shape.k));
      for (int64_t block = 0; block < shape.n * shape.k / 32; ++block) {
        const uint8_t *at = blocks.data() + block * 20;
        uint16_t dBits, mBits;
        std::memcpy(&dBits, at, 2);
        std::memcpy(&mBits, at + 2, 2);
        const float d = _cvtsh_ss(dBits), mw = _cvtsh_ss(mBits);
        for (int i = 0; i < 32; ++i)
          w[size_t(block * 32 + i)] =
              float((at[4 + i % 16] >> (i < 16 ? 0 : 4)) & 15) * d + mw;
      }
      auto packed = engine.packWeights(w.data(), shape.n, shape.k);
      if (!packed)
        return fail(packed.takeError());
      weights = std::move(*packed);
    }
    std::vector<float, AlignedAllocator<float>> yF32(size_t(m * shape.n)),
        yInt8(yF32.size()), yPortable(yF32.size());
    QuantizedActivations activations;
    std::vector<double> f32Seconds, int8Seconds, quantizeSeconds;
    for (int repetition = -2; repetition < repetitions; ++repetition) {
      auto start = std::chrono::steady_clock::now();
      if (llvm::Error error =
              engine.multiply(weights, x.data(), m, yF32.data()))
        return fail(std::move(error));
      const double f32 = secondsSince(start);
      start = std::chrono::steady_clock::now();
      quantizeActivations(x.data(), m, shape.k, shape.k, QuantFormat::Q4_1,
                          activations);
      const double quantize = secondsSince(start);
      quantGemv(quantized, activations, yInt8.data(), shape.n);
      const double int8 = secondsSince(start);
      if (repetition < 0)
        continue; // warm-up
      f32Seconds.push_back(f32);
      int8Seconds.push_back(int8);
      quantizeSeconds.push_back(quantize);
    }
    quantGemv(quantized, activations, yPortable.data(), shape.n,
              /*forceScalar=*/true);
    if (std::memcmp(yInt8.data(), yPortable.data(),
                    yInt8.size() * sizeof(float)) != 0) {
      std::fprintf(stderr,
                   "quant_gemm_bench: %s: the int8 kernel and the portable "
                   "path disagree\n",
                   shape.name);
      return 1;
    }
    float maxDiff = 0, maxValue = 0;
    for (size_t index = 0; index < yF32.size(); ++index) {
      maxDiff = std::max(maxDiff, std::fabs(yF32[index] - yInt8[index]));
      maxValue = std::max(maxValue, std::fabs(yF32[index]));
    }
    const double flops = 2.0 * double(m) * double(shape.n) * double(shape.k);
    const double f32Ms = median(f32Seconds) * 1e3;
    const double int8Ms = median(int8Seconds) * 1e3;
    f32Total += f32Ms;
    int8Total += int8Ms;
    std::printf("| %s | %lld x %lld | %.3f | %.1f | %.3f | %.1f | %.3f | "
                "%.2fx | %.2g |\n",
                shape.name, (long long)shape.n, (long long)shape.k, f32Ms,
                flops / f32Ms * 1e-6, int8Ms, flops / int8Ms * 1e-6,
                median(quantizeSeconds) * 1e3, f32Ms / int8Ms,
                maxDiff / maxValue);
  }
  std::printf("| all four | | %.3f | | %.3f | | | %.2fx | |\n", f32Total,
              int8Total, f32Total / int8Total);
  return 0;
}
