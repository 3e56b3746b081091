//===- QuantGemv.h - Decode-size products with 4/8-bit GGUF weights -------===//
//
// Decoding multiplies one activation row (or a few) by every weight: the
// cost is reading the weights, so reading them as 4.5/8.5-bit blocks beats
// bf16 by 2-4x in bytes. Activations are quantized per block of 32 to int8
// with an f16 scale d (and, for Q4_1 weights, s = d * sum of the block's
// int8 values, in f16), as ggml's Q8_1/Q8_0 activation blocks are, and
// each weight block is dotted in integers with AVX-512 VNNI (u8 x s8 ->
// s32), then scaled. Per output the blocks are folded in order, exactly as
// llama.cpp's AMX/VNNI kernels do:
//   Q4_1: acc = fma(dot, dw * da, acc); acc = fma(mw, sa, acc)
//   Q8_0: acc = fma(dot, dw * da, acc)
// so that a product is bit for bit llama.cpp's (the integer dot products
// are exact; only the order of float operations could differ, and it does
// not).
//
// At load time the GGUF blocks are repacked (packQuantMatrix) into tiles of
// 16 weight rows x one block: lane j of the tile's vectors holds 4
// consecutive values of row j, so one VNNI instruction with a broadcast
// activation dword yields 16 rows' partial sums and no horizontal sum is
// ever needed; the 16 scales (and Q4_1 minimums) follow as f16. Q4_1 tiles
// keep nibbles (low nibble: values 8p..8p+3 of vector p's pair, high:
// 8p+4..8p+7); Q8_0 tiles keep the int8 values offset to unsigned
// (w + 128), so that the signed activations need no offset and the
// correction 128 * (sum of the activation block) is one broadcast per block
// for all 16 rows; a group's Q8_0 scales follow its values, so that a Q8_0
// group is exactly as many bytes as its GGUF blocks (34 per row and block)
// and its value vectors stay 64-byte aligned (for an even number of blocks
// per row, as in every model we run). The kernel prefetches the weight
// stream a few KiB ahead: decode is bound by memory latency. CPUs with
// AVX2 but no AVX-512 VNNI run the same tiles through vpmaddubsw
// (QuantGemvAvx2.cpp; Q4_1 rows four at a time on a group's unpacked
// tiles, QuantGemmAvx2.cpp: an AVX2 host's prompt rows take this path
// too), and a portable path computes the same operations in the same
// order (tests, CPUs without AVX2): all give the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
#define SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H

#include "runtime/kernels/cpu/AlignedAllocator.h"

#include <cstddef>
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

/// Weights repacked for quantGemv: [group of 16 rows][block] tiles.
struct PackedQuantMatrix {
  static constexpr int64_t kGroupRows = 16;
  QuantFormat format = QuantFormat::Q4_1;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t blocks = 0; ///< blocks of 32 per row
  int64_t groups = 0; ///< ceil(rows / 16); missing rows are zero
  std::vector<uint8_t, AlignedAllocator<uint8_t>> bytes;
  /// Whether a Q8_0 weight is -128, which GGUF quantizers never write
  /// (they round to -127..127) and the AVX2 kernel cannot multiply exactly
  /// (QuantGemvAvx2.cpp): such a matrix takes the portable path there.
  bool hasLowestQ80Value = false;
  /// Bytes per group and block. Q4_1 tiles: 256 bytes of nibbles, 16 f16
  /// scales, 16 f16 minimums (320). Q8_0: 512 values w + 128 per tile, and
  /// after the group's `blocks` tiles their 16 f16 scales each (32 bytes).
  static constexpr int64_t tileBytes(QuantFormat format) {
    return format == QuantFormat::Q4_1 ? 320 : 544;
  }
};

/// Where a PackedQuantMatrix keeps a tile's parts: for QuantGemv and for
/// the AMX GEMM, which unpacks the same tiles to bf16 (AmxGemm.h).
namespace quantlayout {
/// Offsets inside a Q4_1 tile; Q8_0 value tiles, then the group's scales
/// (see PackedQuantMatrix::tileBytes).
constexpr int64_t kQ41Scales = 256, kQ41Minimums = 288;
constexpr int64_t kQ80ValueBytes = 512, kQ80ScaleBytes = 32;

/// Byte offsets of the values and of the 16 f16 scales of (group, block).
inline int64_t valuesOffset(QuantFormat format, int64_t blocks, int64_t group,
                            int64_t block) {
  const int64_t tileBytes = PackedQuantMatrix::tileBytes(format);
  return format == QuantFormat::Q4_1
             ? (group * blocks + block) * tileBytes
             : group * blocks * tileBytes + block * kQ80ValueBytes;
}
inline int64_t scalesOffset(QuantFormat format, int64_t blocks, int64_t group,
                            int64_t block) {
  return format == QuantFormat::Q4_1
             ? valuesOffset(format, blocks, group, block) + kQ41Scales
             : valuesOffset(format, blocks, group, blocks) +
                   block * kQ80ScaleBytes;
}
} // namespace quantlayout

/// Packs `count` matrices of one format and width stacked by rows (e.g. Q,
/// K and V into one QKV matrix).
PackedQuantMatrix packQuantMatrices(const QuantMatrix *parts, size_t count);
inline PackedQuantMatrix packQuantMatrix(const QuantMatrix &matrix) {
  return packQuantMatrices(&matrix, 1);
}

/// Activation rows quantized per block of 32, for weights of `format`.
/// values: [rows][blocks * 32] int8 values in natural order. scales: d =
/// max|x| / 127 rounded to f16; scaledSums: d * (sum of the block's int8
/// values), rounded to f16 for Q4_1 as ggml's Q8_1 stores it; sums: that
/// sum as an integer (Q8_0 weights subtract 128 * sum, see above).
struct QuantizedActivations {
  QuantFormat format = QuantFormat::Q4_1;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t blocks = 0;
  std::vector<uint8_t> values;
  std::vector<float> scales;
  std::vector<float> scaledSums;
  std::vector<int32_t> sums;
  /// The int8 value of (row, column).
  int8_t value(int64_t row, int64_t column) const {
    return int8_t(values[size_t(row * blocks * 32 + column)]);
  }
};

/// Quantizes x[m][k] (k % 32 == 0, rows `stride` floats apart) into `out`
/// (reusing its memory) for weights of `format`, as ggml's x86
/// quantize_row_q8_1 / q8_0 do: multiply by 127 / max, round to even.
/// `forceScalar` takes the portable path (tests: both give the same bits).
void quantizeActivations(const float *x, int64_t m, int64_t k, int64_t stride,
                         QuantFormat format, QuantizedActivations &out,
                         bool forceScalar = false);

/// Sizes `out` for m rows of k values of `format` (contents undefined until
/// quantizeActivationBlocks writes them).
void prepareActivations(int64_t m, int64_t k, QuantFormat format,
                        QuantizedActivations &out);

/// Quantizes blocks [firstBlock, endBlock) of every row of x (rows `stride`
/// floats apart) into a prepared `out`; no threads of its own, so that the
/// callers inside a parallel region can split the blocks between them.
void quantizeActivationBlocks(const float *x, int64_t stride,
                              int64_t firstBlock, int64_t endBlock,
                              QuantizedActivations &out,
                              bool forceScalar = false);

/// `value` rounded to the nearest f16 (ties to even), back in f32.
float roundToHalf(float value);

/// y[r][n] (rows `outputStride` floats apart) = activations[r] . W[n] for
/// every activation row r and weight row n.
void quantGemv(const PackedQuantMatrix &weights, const QuantizedActivations &x,
               float *y, int64_t outputStride, bool forceScalar = false);

/// quantGemv for the weight rows of groups [firstGroup, endGroup) (16 rows
/// each) only, on the calling thread: for callers that split one product
/// between the threads of their own parallel region.
void quantGemvGroups(const PackedQuantMatrix &weights,
                     const QuantizedActivations &x, float *y,
                     int64_t outputStride, int64_t firstGroup,
                     int64_t endGroup);

/// Whether a vector path (AVX-512 VNNI or AVX2) runs on this CPU.
bool hasQuantGemvKernel();

/// Whether many activation rows (a prompt) of weights in `format` multiply
/// here faster than an f32 GEMM: AVX-512 VNNI (either format), or AVX2's
/// four-row Q4_1 kernel (QuantGemmAvx2.cpp).
bool hasQuantGemmKernel(QuantFormat format);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_QUANTGEMV_H
