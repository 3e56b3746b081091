//===- GemvBench.cpp - Decode's 4/8-bit GEMVs against the read floor ------===//
//
// A decode token of SmolLM2-135M Q4_1 as its weight products alone: per
// layer the qkv, attn-out, gate|up and down GEMVs on Q4_1 weights, then the
// Q8_0 output head, each layer with its own random weights (30 of them, as
// in the model, so that they stream from memory and not from L3), one
// activation row, `threads` OpenMP threads. Prints the time and GB/s of
// each product summed over the layers, and of the head, as a markdown
// table: set beside read_bandwidth_bench's rate, the share of decode's
// floor the GEMVs reach.
//
//   gemv_bench [repetitions] [threads]             (defaults 20 2)
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/QuantGemv.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace spanc::cpu;

namespace {

constexpr int kLayers = 30;
constexpr int64_t kDim = 576, kKvDim = 192, kHidden = 1536, kVocab = 49152;

struct Product {
  const char *name;
  QuantFormat format;
  int64_t rows, columns;
  int copies; ///< distinct weight matrices (layers)
};

/// `rows` x `columns` GGUF blocks of `format` with random values and small
/// finite f16 scales.
std::vector<uint8_t> randomBlocks(QuantFormat format, int64_t rows,
                                  int64_t columns, std::mt19937 &random) {
  const int64_t blockBytes = quantBlockBytes(format);
  const int64_t blocks = rows * columns / 32;
  std::vector<uint8_t> bytes(size_t(blocks * blockBytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t block = 0; block < blocks; ++block) {
    uint8_t *at = bytes.data() + block * blockBytes;
    for (int64_t i = 0; i < blockBytes; ++i)
      at[i] = uint8_t(byte(random));
    // Q8_0 values in -127..127, as GGUF quantizers write them (a -128 sends
    // a matrix to the portable path on AVX2: QuantGemv.h).
    if (format == QuantFormat::Q8_0)
      for (int64_t i = 2; i < blockBytes; ++i)
        if (at[i] == 0x80)
          at[i] = 0x81;
    const uint16_t scale = 0x2000 + uint16_t(byte(random)); // ~2^-7
    std::memcpy(at, &scale, 2);
    if (format == QuantFormat::Q4_1)
      std::memcpy(at + 2, &scale, 2);
  }
  return bytes;
}

double nowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

int main(int argc, char **argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 20;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  if (repetitions < 1 || threads < 1) {
    std::fprintf(stderr, "usage: %s [repetitions] [threads]\n", argv[0]);
    return 2;
  }
  if (!hasQuantGemvKernel())
    std::fprintf(stderr, "note: neither AVX-512 VNNI nor AVX2: the portable "
                         "path runs\n");
  omp_set_num_threads(threads);
  const Product products[] = {
      {"qkv (Q4_1)", QuantFormat::Q4_1, kDim + 2 * kKvDim, kDim, kLayers},
      {"attn-out (Q4_1)", QuantFormat::Q4_1, kDim, kDim, kLayers},
      {"gate|up (Q4_1)", QuantFormat::Q4_1, 2 * kHidden, kDim, kLayers},
      {"down (Q4_1)", QuantFormat::Q4_1, kDim, kHidden, kLayers},
      {"output head (Q8_0)", QuantFormat::Q8_0, kVocab, kDim, 1},
  };
  constexpr int kProducts = sizeof(products) / sizeof(products[0]);
  std::mt19937 random(7);
  std::vector<std::vector<PackedQuantMatrix>> weights(kProducts);
  std::vector<QuantizedActivations> activations(kProducts);
  int64_t maxRows = 0;
  for (int p = 0; p < kProducts; ++p) {
    const Product &product = products[p];
    for (int copy = 0; copy < product.copies; ++copy) {
      std::vector<uint8_t> blocks =
          randomBlocks(product.format, product.rows, product.columns, random);
      QuantMatrix matrix{
          product.format, blocks.data(), product.rows, product.columns,
          product.columns / 32 * quantBlockBytes(product.format)};
      weights[p].push_back(packQuantMatrix(matrix));
    }
    std::vector<float> x(size_t(product.columns));
    std::normal_distribution<float> normal(0, 1);
    for (float &value : x)
      value = normal(random);
    quantizeActivations(x.data(), 1, product.columns, product.columns,
                        product.format, activations[p]);
    maxRows = std::max(maxRows, product.rows);
  }
  std::vector<float> y(static_cast<size_t>(maxRows));
  // seconds[p][repetition]: product p over all its copies; a repetition
  // runs the token's products in the model's order.
  std::vector<std::vector<double>> seconds(kProducts);
  std::vector<double> tokens;
  for (int repetition = 0; repetition < repetitions + 1; ++repetition) {
    double layerSeconds[kProducts] = {};
    const double tokenStart = nowSeconds();
    for (int layer = 0; layer < kLayers; ++layer)
      for (int p = 0; p < kProducts; ++p) {
        if (layer >= products[p].copies)
          continue;
        const double start = nowSeconds();
        quantGemv(weights[p][size_t(layer)], activations[p], y.data(),
                  products[p].rows);
        layerSeconds[p] += nowSeconds() - start;
      }
    if (repetition == 0)
      continue; // warm-up
    tokens.push_back(nowSeconds() - tokenStart);
    for (int p = 0; p < kProducts; ++p)
      seconds[p].push_back(layerSeconds[p]);
  }
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  std::printf("Decode's weight products, %d layers + head, %d thread(s), "
              "median of %d tokens\n\n",
              kLayers, threads, repetitions);
  std::printf("| product | MB read | ms a token | GB/s |\n");
  std::printf("|---|---:|---:|---:|\n");
  double totalBytes = 0;
  for (int p = 0; p < kProducts; ++p) {
    double bytes = 0;
    for (const PackedQuantMatrix &matrix : weights[p])
      bytes += double(matrix.bytes.size());
    totalBytes += bytes;
    const double time = median(seconds[p]);
    std::printf("| %s | %.1f | %.3f | %.1f |\n", products[p].name, bytes / 1e6,
                time * 1e3, bytes / time / 1e9);
  }
  const double token = median(tokens);
  std::printf("| a token (all, in order) | %.1f | %.3f | %.1f |\n",
              totalBytes / 1e6, token * 1e3, totalBytes / token / 1e9);
  return 0;
}
