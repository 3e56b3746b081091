//===- QuantGemv.h - Decode-size products with 4/8-bit GGUF weights -------===//
//
// Decoding multiplies one activation row (or a few) by every weight: the
// cost is reading the weights, so reading them as 4.5/8.5-bit blocks beats
// bf16 by 2-4x in bytes. Activations are quantized per block of 32 to int8
// with an f32 scale (and their sum), and each weight block is dotted in
// integers with AVX-512 VNNI (u8 x s8 -> s32), then scaled:
//   Q4_1: w = d*q + m, q in [0,16)  => d*da*sum(q*a) + m*(da*sum(a))
//   Q8_0: w = d*q, q in [-128,128)  => d*da*(sum((q+128)*a) - 128*sum(a))
//
// At load time the GGUF blocks are repacked (packQuantMatrix) in pairs of
// blocks whose 64 values are interleaved in 4-value chunks (block 0, block
// 1, block 0, ...), so that one VNNI instruction yields per-block partial
// sums in alternating lanes and a pair's two scales apply with one
// broadcast; Q8_0 values are stored +128 (unsigned). The activations are
// quantized into the same order. Rows with an odd number of blocks get a
// zero block. A scalar path computes the same integer sums (tests, CPUs
// without VNNI).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
#define SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H

#include <cstdint>
#include <vector>

namespace spanc::cpu {

enum class QuantFormat { Q4_1, Q8_0 };

/// Bytes of one GGUF block of 32 weights.
constexpr int64_t quantBlockBytes(QuantFormat format) {
  return format == QuantFormat::Q4_1 ? 20 : 34;
}

/// A [rows][columns] weight matrix in GGUF blocks, rows `rowBytes` apart
/// (columns % 32 == 0).
struct QuantMatrix {
  QuantFormat format = QuantFormat::Q4_1;
  const uint8_t *data = nullptr;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t rowBytes = 0;
};

/// The same weights repacked for quantGemv.
struct PackedQuantMatrix {
  QuantFormat format = QuantFormat::Q4_1;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t pairs = 0;    ///< block pairs per row
  int64_t rowBytes = 0; ///< pairs * pairBytes
  std::vector<uint8_t> bytes;
  /// Q4_1: 32 bytes of nibbles, 2 f16 scales, 2 f16 minimums (40);
  /// Q8_0: 64 bytes of value+128, 2 f16 scales (68).
  static constexpr int64_t pairBytes(QuantFormat format) {
    return format == QuantFormat::Q4_1 ? 40 : 68;
  }
};

PackedQuantMatrix packQuantMatrix(const QuantMatrix &matrix);

/// Activation rows quantized to int8 in the pair-interleaved order; per
/// block (natural block index) the scale and scale * sum of its values.
/// Both are rounded to f16 as ggml's Q8_1 (for Q4_1 weights) and Q8_0 (for
/// Q8_0 weights) activation blocks store them, so that the products equal
/// llama.cpp's up to the order of float additions.
struct QuantizedActivations {
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t pairs = 0;
  std::vector<int8_t> values;    ///< [rows][pairs * 64]
  std::vector<float> scales;     ///< [rows][pairs * 2]
  std::vector<float> scaledSums; ///< [rows][pairs * 2]
};

/// Quantizes x[m][k] (k % 32 == 0, rows `stride` floats apart) into `out`
/// (reusing its memory) for weights of `format`.
void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantFormat format, QuantizedActivations &out);

/// `value` rounded to the nearest f16 (ties to even), back in f32.
float roundToHalf(float value);

/// y[r][n] (rows `outputStride` floats apart) = activations[r] . W[n] for
/// every activation row r and weight row n.
void quantGemv(const PackedQuantMatrix &weights, const QuantizedActivations &x,
               float *y, int64_t outputStride, bool forceScalar = false);

/// Whether the VNNI path runs on this CPU.
bool hasQuantGemvKernel();

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
