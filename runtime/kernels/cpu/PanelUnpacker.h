//===- PanelUnpacker.h - 4/8-bit weight tiles to bf16 VNNI panels ---------===//
//
// Borrowed weights (AmxGemm.h, "Borrowed weights") keep no bf16 copy: each
// GEMM call unpacks the panel it multiplies from the 4/8-bit tiles decode
// reads. The panel layout (K pairs of 16 columns, AMX's VNNI order) is the
// B operand of both AMX's TDPBF16PS (AmxGemm.cpp) and AVX-512's VDPBF16PS
// (Avx512Bf16Gemm.cpp), so both kernels share this unpacker.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_PANELUNPACKER_H
#define SPANC_RUNTIME_KERNELS_CPU_PANELUNPACKER_H

#include "runtime/kernels/cpu/AmxGemm.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace spanc::cpu {

constexpr int64_t kTileElements = 512; ///< bf16 values in one 1 KiB tile
constexpr int64_t kPrefetchTiles = 8;  ///< unpacking fetches this far ahead

/// Unpacks one panel of borrowed weights into a buffer of kBlocks x 2 bf16
/// B tiles (tile t: B tile t % 2 of K block t / 2) a few tile rows at a
/// time, so that the work spreads evenly between tile products: the vector
/// units then unpack in the shadow of the tile unit (a burst of a whole
/// tile, ~200 instructions, between two blocks' products does not
/// overlap). Plain weights: B tile i holds group 2 panel + i; gated: the
/// gate group `panel`, then the up group `panel` of the second half.
/// Groups past the matrix are zeros.
///
/// Tile row r holds the 16 rows' K pair (2r, 2r + 1), row j in dword j;
/// the lanes of a PackedQuantMatrix tile are its rows too, so every step
/// is lane-wise. Each value is bf16 of dequantizeRow's f32, q * d + m
/// (Q4_1) or q * d (Q8_0): d is an f16 (11 significant bits) and q has at
/// most 8, so q * d is exact in f32 and one FMA rounds as the reader's
/// multiply, then add.
class PanelUnpacker {
public:
  PanelUnpacker(const AmxWeights &weights, int64_t panel, uint16_t *out)
      : source(weights.quant), out(out), tiles(2 * weights.quant.blocks) {
    groups[0] = 2 * panel, groups[1] = 2 * panel + 1;
    if (weights.gated)
      groups[0] = panel, groups[1] = weights.rows / 2 / 16 + panel;
    for (int64_t t = 0; t < std::min(tiles, kPrefetchTiles); ++t)
      prefetch(t);
  }

  /// Tile rows left to unpack.
  int64_t remaining() const { return (tiles - tile) * 16 - row; }

  /// Unpacks the next `rows` tile rows (fewer at the end of the panel).
  SPANC_AVX512BF16 inline void advance(int64_t rows) {
    // Whole tiles at once where they fit: their scales stay in registers.
    for (; rows >= 16 && row == 0 && tile < tiles; rows -= 16, ++tile) {
      startTile();
      if (!absent)
        unpackTile();
    }
    for (; rows > 0 && tile < tiles; --rows) {
      if (row == 0)
        startTile();
      if (!absent)
        unpackRow();
      if (++row == 16)
        row = 0, ++tile;
    }
  }

private:
  const uint8_t *valuesOf(int64_t t) const {
    return source.bytes + quantlayout::valuesOffset(source.format,
                                                    source.blocks,
                                                    groups[t % 2], t / 2);
  }

  /// A panel's tiles are read a few rows at a time, too slowly for the
  /// hardware prefetcher to follow: each tile's source is fetched
  /// kPrefetchTiles tiles ahead.
  void prefetch(int64_t t) const {
    if (t >= tiles || groups[t % 2] >= source.groups)
      return;
    const uint8_t *values = valuesOf(t);
    for (int64_t line = 0; line < PackedQuantMatrix::tileBytes(source.format);
         line += 64)
      _mm_prefetch(reinterpret_cast<const char *>(values + line), _MM_HINT_T0);
  }

  SPANC_AVX512BF16 void startTile() {
    prefetch(tile + kPrefetchTiles);
    target = out + tile * kTileElements;
    absent = groups[tile % 2] >= source.groups;
    if (absent) {
      std::memset(target, 0, kTileElements * sizeof(uint16_t));
      return;
    }
    values = valuesOf(tile);
    _mm512_store_ps(
        scale,
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(
            source.bytes +
            quantlayout::scalesOffset(source.format, source.blocks,
                                      groups[tile % 2], tile / 2)))));
    if (source.format == QuantFormat::Q4_1)
      _mm512_store_ps(minimum, _mm512_cvtph_ps(_mm256_loadu_si256(
                                   reinterpret_cast<const __m256i *>(
                                       values + quantlayout::kQ41Minimums))));
  }

  /// Tile row `row` of tile `tile`: the K pair (2 row, 2 row + 1) of the
  /// 16 rows.
  SPANC_AVX512BF16 inline void unpackRow() {
    unpackTileRow(source.format, values, row, _mm512_load_ps(scale),
                  _mm512_load_ps(minimum), target);
  }

  /// All 16 rows of tile `tile`, its scales and minimums in registers.
  SPANC_AVX512BF16 inline void unpackTile() {
    const __m512 scales = _mm512_load_ps(scale);
    const __m512 minimums = _mm512_load_ps(minimum);
    const uint8_t *from = values;
    uint16_t *to = target;
    if (source.format == QuantFormat::Q4_1) {
      for (int r = 0; r < 16; ++r)
        unpackTileRow(QuantFormat::Q4_1, from, r, scales, minimums, to);
    } else {
      for (int r = 0; r < 16; ++r)
        unpackTileRow(QuantFormat::Q8_0, from, r, scales, minimums, to);
    }
  }

  SPANC_AVX512BF16 static inline void
  unpackTileRow(QuantFormat format, const uint8_t *values, int row,
                __m512 scale, __m512 minimum, uint16_t *target) {
    __m512 even, odd;
    if (format == QuantFormat::Q4_1) {
      // Vector p holds values 8p..8p+7 of each row: bytes 0-3 low nibbles
      // are 8p..8p+3, high nibbles 8p+4..8p+7; pair (8p + 2s, + 1) sits at
      // bit kShift[s] and 8 bits above. A nibble becomes its f32 value by
      // a permute, which reads an index's low 4 bits only: no mask, no
      // conversion.
      static constexpr unsigned kShift[4] = {0, 16, 4, 20};
      const __m512 levels =
          _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      const __m512i packed = _mm512_loadu_si512(values + 64 * (row / 4));
      const unsigned shift = kShift[row % 4];
      even = _mm512_fmadd_ps(
          _mm512_permutexvar_ps(_mm512_srli_epi32(packed, shift), levels),
          scale, minimum);
      odd = _mm512_fmadd_ps(
          _mm512_permutexvar_ps(_mm512_srli_epi32(packed, shift + 8), levels),
          scale, minimum);
    } else {
      // Q8_0: vector v holds values 4v..4v+3 of each row as w + 128.
      const __m512i packed = _mm512_loadu_si512(values + 64 * (row / 2));
      const __m512i byte = _mm512_set1_epi32(0xff);
      const __m512i offset = _mm512_set1_epi32(128);
      const unsigned shift = 16 * unsigned(row % 2);
      even = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_sub_epi32(
              _mm512_and_si512(_mm512_srli_epi32(packed, shift), byte),
              offset)),
          scale);
      odd = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_sub_epi32(
              _mm512_and_si512(_mm512_srli_epi32(packed, shift + 8), byte),
              offset)),
          scale);
    }
    _mm512_store_si512(target + 32 * row, interleaveBf16Pairs(even, odd));
  }

  const AmxQuantSource &source;
  int64_t groups[2];
  uint16_t *out;
  const int64_t tiles;
  int64_t tile = 0; ///< the tile being unpacked
  int row = 0;      ///< its next row
  // The tile being unpacked: where it goes, its source, scales, minimums.
  uint16_t *target = nullptr;
  const uint8_t *values = nullptr;
  bool absent = false;
  // As f32 arrays: a class member of a vector type would need AVX-512 in
  // every function that touches the object.
  alignas(64) float scale[16] = {}, minimum[16] = {};
};

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_PANELUNPACKER_H
