//===- QuantGemv.h - Decode-size products with 4/8-bit GGUF weights -------===//
//
// Decoding multiplies one activation row (or a few) by every weight: the
// cost is reading the weights, so reading them in their 4.5/8.5-bit GGUF
// blocks beats bf16 by 2-4x in bytes. Activations are quantized per block
// of 32 to int8 with an f32 scale (and their sum), and each weight block is
// dotted in integers with AVX-512 VNNI (u8 x s8 -> s32), then scaled:
//   Q4_1: w = d*q + m, q in [0,16)  => d*da*sum(q*a) + m*(da*sum(a))
//   Q8_0: w = d*q, q in [-128,128)  => d*da*(sum((q+128)*a) - 128*sum(a))
// The weights are read in place from the mapped file. Shapes must have
// columns % 32 == 0. A scalar path computes the same integer sums exactly
// (tests, CPUs without VNNI).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
#define SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H

#include <cstdint>
#include <vector>

namespace spanc::cpu {

enum class QuantFormat { Q4_1, Q8_0 };

/// Bytes of one block of 32 weights.
constexpr int64_t quantBlockBytes(QuantFormat format) {
  return format == QuantFormat::Q4_1 ? 20 : 34;
}

/// A [rows][columns] weight matrix in GGUF blocks, rows `rowBytes` apart.
struct QuantMatrix {
  QuantFormat format = QuantFormat::Q4_1;
  const uint8_t *data = nullptr;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t rowBytes = 0;
};

/// Activation rows quantized per block of 32: values[r][k] int8, and per
/// block its scale and the integer sum of its values.
struct QuantizedActivations {
  int64_t rows = 0;
  int64_t columns = 0;
  std::vector<int8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

/// Quantizes x[m][k] (k % 32 == 0, rows `stride` floats apart) into `out`
/// (reusing its memory).
void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantizedActivations &out);

/// y[r][n] (rows `outputStride` floats apart) = activations[r] . W[n] for
/// every activation row r and weight row n.
void quantGemv(const QuantMatrix &weights, const QuantizedActivations &x,
               float *y, int64_t outputStride, bool forceScalar = false);

/// Whether the VNNI path runs on this CPU.
bool hasQuantGemvKernel();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
