//===- QuantGemvInternal.h - What QuantGemv's per-ISA files share ---------===//
//
// QuantGemv.cpp holds the reference and the AVX-512 VNNI kernel and picks a
// path; QuantGemvAvx2.cpp holds the AVX2 kernel and quantizer (one
// instruction set a file). Every path folds the same terms in the same
// order, so all give the same bits (QuantGemv.h).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_QUANTGEMVINTERNAL_H
#define SPANC_RUNTIME_KERNELS_CPU_QUANTGEMVINTERNAL_H

#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/kernels/cpu/VectorMathAvx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace spanc::cpu::quantgemv {

constexpr int kBlock = 32; ///< values per quantization block
constexpr int64_t kGroupRows = PackedQuantMatrix::kGroupRows;

/// How far ahead of its tile a group's loop asks for the weights: two
/// threads decoding SmolLM2 ran 410 / 424 / 419 / 419 tok/s at 4 / 8 / 12
/// / 16 KiB (alternating, median of 5; 2 KiB: 423 against 4 KiB's 441 in
/// another run).
constexpr int64_t kPrefetchBytes = 8192;

/// Where the prefetches put the weights: L1 on Intel hosts (where they
/// were measured, above), L2 on AMD. On a Zen 4 a stream prefetched into
/// L1 read slower than one left to the hardware, and one prefetched into
/// L2 faster still: tg128 with two threads 208-234 (L1) against 230-265
/// (none) and 239-284 tok/s (L2), 6 alternating rounds (gemv_bench: a
/// token's products 18 % faster in L2 than in L1).
bool prefetchWeightsToL2();

/// Bytes from one block's values to the next's within a group, and from
/// one block's 16 scales to the next's: Q4_1 tiles hold their scales, Q8_0
/// scales follow the group's values (quantlayout).
constexpr int64_t valueStride(QuantFormat format) {
  return format == QuantFormat::Q4_1 ? PackedQuantMatrix::tileBytes(format)
                                     : quantlayout::kQ80ValueBytes;
}
constexpr int64_t scaleStride(QuantFormat format) {
  return format == QuantFormat::Q4_1 ? PackedQuantMatrix::tileBytes(format)
                                     : quantlayout::kQ80ScaleBytes;
}

/// The weights stream from L3 or memory once per token: a group's loop
/// asks for the lines kPrefetchBytes ahead of the `bytes` of its tile, so
/// that more misses are in flight than the hardware prefetcher keeps.
inline void prefetchAhead(const uint8_t *tile, int64_t bytes, bool toL2) {
  for (int64_t line = 0; line < bytes; line += 64) {
    const char *ahead =
        reinterpret_cast<const char *>(tile + kPrefetchBytes + line);
    if (toL2)
      _mm_prefetch(ahead, _MM_HINT_T1);
    else
      _mm_prefetch(ahead, _MM_HINT_T0);
  }
}

/// 8 f16 values of a tile (its scales or minimums) as f32, on F16C.
SPANC_AVX2 inline __m256 loadHalves(const uint8_t *halves) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(halves)));
}

/// Group `group`'s output lanes that are weight rows (a matrix's last
/// group may be short), as masks of its low (0-7) and high (8-15) lanes.
struct GroupLaneMasks {
  __m256i low, high;
};
SPANC_AVX2 inline GroupLaneMasks
groupLaneMasks(const PackedQuantMatrix &weights, int64_t group) {
  const int valid =
      int(std::min<int64_t>(kGroupRows, weights.rows - group * kGroupRows));
  const __m256i laneIndex = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return {_mm256_cmpgt_epi32(_mm256_set1_epi32(valid), laneIndex),
          _mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8), laneIndex)};
}

/// One activation row's 16 outputs of a group, its valid lanes only, at
/// `out` (the row's output at the group's first column).
SPANC_AVX2 inline void storeGroupRow(float *out, const GroupLaneMasks &masks,
                                     __m256 low, __m256 high) {
  _mm256_maskstore_ps(out, masks.low, low);
  _mm256_maskstore_ps(out + 8, masks.high, high);
}

/// Whether the AVX2 kernel multiplies `weights` exactly: it cannot when a
/// Q8_0 weight is -128 (PackedQuantMatrix::hasLowestQ80Value).
bool avx2Handles(const PackedQuantMatrix &weights);

/// Every activation row against the weight rows of groups [firstGroup,
/// endGroup), on AVX2 + FMA + F16C (QuantGemvAvx2.cpp); avx2Handles must
/// hold.
void gemvGroupsAvx2(const PackedQuantMatrix &weights,
                    const QuantizedActivations &x, float *y,
                    int64_t outputStride, int64_t firstGroup, int64_t endGroup);

/// Activation rows [0, endRow) (a multiple of 4) against the Q4_1 weight
/// rows of `group`, four rows at a time on the group's unpacked tiles
/// (QuantGemmAvx2.cpp): gemvGroupsAvx2's bits, for many rows at a time.
void gemmGroupAvx2(const PackedQuantMatrix &weights,
                   const QuantizedActivations &x, float *y,
                   int64_t outputStride, int64_t group, int64_t endRow);

/// One block of 32 activations quantized as quantizeBlockScalar does, on
/// AVX2 (same bits).
void quantizeBlockAvx2(const float *source, uint8_t *values, bool roundSum,
                       float &scale, float &scaledSum, int32_t &blockSum);

} // namespace spanc::cpu::quantgemv

#endif // SPANC_RUNTIME_KERNELS_CPU_QUANTGEMVINTERNAL_H
