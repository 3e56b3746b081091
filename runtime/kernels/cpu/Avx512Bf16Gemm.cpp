//===- Avx512Bf16Gemm.cpp - bf16 weight GEMMs on AVX-512 BF16 -------------===//

#include "runtime/kernels/cpu/Avx512Bf16Gemm.h"

#include "runtime/kernels/cpu/PanelUnpacker.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <utility>

namespace spanc::cpu {

namespace {

constexpr int64_t kPanelColumns = 32; ///< a panel's outputs, K block's size
/// Rows a block keeps in registers: 24 accumulators, the panel row's two
/// registers and a broadcast use 27 of the 32.
constexpr int kMaxBlockRows = 12;

/// Rows [0, Rows) of a row block of `a` (bf16 pairs interleaved by row:
/// pair p of row r at dword p * kMaxBlockRows + r, so that one pointer with
/// constant offsets reaches every row) times the panel (kBlocks K blocks of
/// two 16-column tiles), then the epilogue into `out` (row r at
/// out + r * yStride; `width` real columns, or 16 SwiGLU outputs).
template <int Rows>
SPANC_AVX512BF16 void multiplyRows(const uint32_t *a, const uint16_t *panel,
                                   int64_t kBlocks, AmxEpilogue epilogue,
                                   float *out, int64_t yStride, int64_t width) {
  __m512 low[Rows], high[Rows]; // columns 0-15, 16-31
#pragma GCC unroll 12
  for (int r = 0; r < Rows; ++r)
    low[r] = high[r] = _mm512_setzero_ps();
  for (int64_t block = 0; block < kBlocks; ++block) {
    const uint16_t *tiles = panel + block * 2 * kTileElements;
    const uint32_t *pairs = a + block * 16 * kMaxBlockRows;
#pragma GCC unroll 16
    for (int pair = 0; pair < 16; ++pair) {
      const __m512bh left =
          reinterpret_cast<__m512bh>(_mm512_load_si512(tiles + 32 * pair));
      const __m512bh right = reinterpret_cast<__m512bh>(
          _mm512_load_si512(tiles + kTileElements + 32 * pair));
#pragma GCC unroll 12
      for (int r = 0; r < Rows; ++r) {
        const __m512bh x = reinterpret_cast<__m512bh>(
            _mm512_set1_epi32(int32_t(pairs[pair * kMaxBlockRows + r])));
        low[r] = _mm512_dpbf16_ps(low[r], x, left);
        high[r] = _mm512_dpbf16_ps(high[r], x, right);
      }
    }
  }
  // Columns past `width` (a partial last panel) are masked off.
  const __mmask16 lowMask = width >= 16 ? 0xffff : (1u << width) - 1;
  const __mmask16 highMask = width >= 32   ? 0xffff
                             : width <= 16 ? 0
                                           : (1u << (width - 16)) - 1;
#pragma GCC unroll 12
  for (int r = 0; r < Rows; ++r) {
    float *row = out + r * yStride;
    switch (epilogue) {
    case AmxEpilogue::SwiGlu:
      // Columns 0-15: gate, 16-31: up, of the same 16 outputs.
      _mm512_storeu_ps(row, swiGlu512(low[r], high[r]));
      break;
    case AmxEpilogue::Accumulate:
      low[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(lowMask, row), low[r]);
      high[r] =
          _mm512_add_ps(_mm512_maskz_loadu_ps(highMask, row + 16), high[r]);
      [[fallthrough]];
    case AmxEpilogue::Store:
      _mm512_mask_storeu_ps(row, lowMask, low[r]);
      _mm512_mask_storeu_ps(row + 16, highMask, high[r]);
      break;
    }
  }
}

/// Rounds K values [first, first + 32) of a row block's rows (`rows` real
/// ones, the rest zero; values past k zero) to bf16 and stores their 16
/// pairs interleaved by row, pair p of row r at out[p * kMaxBlockRows + r]:
/// a 16 x 16 transposition of the rows' pair vectors (rows 12-15 zero)
/// instead of a scalar store a pair (~5 % of a 512-row call). The bits of
/// convertToBf16 (VCVTNE2PS2BF16 rounds as its VCVTNEPS2BF16), except that
/// the last K % 16 values of a row, which it rounded in integer
/// arithmetic, now round in the instruction too (a denormal becomes 0).
SPANC_AVX512BF16 void roundChunk(const float *x, int64_t k, int64_t rows,
                                 int64_t first, uint32_t *out) {
  const int64_t valid = std::clamp<int64_t>(k - first, 0, 32);
  const __mmask16 low = valid >= 16 ? 0xffff : (1u << valid) - 1;
  const __mmask16 high = valid >= 32   ? 0xffff
                         : valid <= 16 ? 0
                                       : (1u << (valid - 16)) - 1;
  __m512i v[16];
  for (int r = 0; r < 16; ++r) {
    if (r >= rows) {
      v[r] = _mm512_setzero_si512();
      continue;
    }
    const float *row = x + r * k + first;
    v[r] = reinterpret_cast<__m512i>(
        _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high, row + 16),
                            _mm512_maskz_loadu_ps(low, row)));
  }
  // Rows 4i..4i+3, column 4L + j of them in lane L of b[4i + j].
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  __m512i b[16];
  for (int i = 0; i < 4; ++i) {
    b[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Column 4L + j gathers lane L of b[j], b[4 + j], b[8 + j], b[12 + j].
  for (int j = 0; j < 4; ++j) {
    // Lanes 0-1 and 2-3 of rows 0-7 (head) and of rows 8-15 (tail).
    const __m512i head01 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44);
    const __m512i head23 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee);
    const __m512i tail01 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
    const __m512i tail23 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
    const __m512i columns[4] = {_mm512_shuffle_i32x4(head01, tail01, 0x88),
                                _mm512_shuffle_i32x4(head01, tail01, 0xdd),
                                _mm512_shuffle_i32x4(head23, tail23, 0x88),
                                _mm512_shuffle_i32x4(head23, tail23, 0xdd)};
    for (int lane = 0; lane < 4; ++lane)
      _mm512_mask_storeu_epi32(out + (4 * lane + j) * kMaxBlockRows, 0x0fff,
                               columns[lane]);
  }
}

using MultiplyRows = void (*)(const uint32_t *, const uint16_t *, int64_t,
                              AmxEpilogue, float *, int64_t, int64_t);

template <int... Rows>
constexpr auto makeKernels(std::integer_sequence<int, Rows...>) {
  return std::array<MultiplyRows, sizeof...(Rows)>{&multiplyRows<Rows + 1>...};
}

/// kKernels[r - 1] multiplies r rows.
constexpr auto kKernels =
    makeKernels(std::make_integer_sequence<int, kMaxBlockRows>());

} // namespace

void avx512Bf16Gemm(const AmxWeights &weights, const float *x, int64_t m,
                    float *y, AmxScratch &scratch, AmxEpilogue epilogue) {
  const int64_t n = weights.rows, k = weights.columns;
  const bool swiGlu = epilogue == AmxEpilogue::SwiGlu;
  assert(swiGlu == weights.gated && "gated packs need the SwiGLU epilogue");
  const int64_t yStride = swiGlu ? n / 2 : n;
  const int64_t paddedK = weights.paddedColumns;
  const int64_t kBlocks = paddedK / kPanelColumns;
  const int64_t panels = weights.paddedRows / kPanelColumns;
  const int64_t panelElements = kBlocks * 2 * kTileElements;
  // The rows in blocks of kMaxBlockRows, each block's K pairs interleaved
  // by row (multiplyRows), zero rows padding the last block.
  const int64_t rowBlocks = (m + kMaxBlockRows - 1) / kMaxBlockRows;
  const int64_t blockElements = kMaxBlockRows * paddedK;
  if (scratch.activations.size() < size_t(rowBlocks * blockElements))
    scratch.activations.resize(size_t(rowBlocks * blockElements));
  uint16_t *a = scratch.activations.data();
  if (weights.isBorrowed())
    scratch.reservePanelThreads(omp_get_max_threads());

#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    // Every thread reads every row: round them all first, each thread an
    // even share of the blocks' 32-value K chunks (shared by blocks of
    // rows, a 28-row call's three blocks gave one thread twice the
    // other's work).
    const int64_t chunks = rowBlocks * kBlocks; // kBlocks: K chunks of 32
    for (int64_t chunk = chunks * thread / threads,
                 end = chunks * (thread + 1) / threads;
         chunk < end; ++chunk) {
      const int64_t block = chunk / kBlocks;
      const int64_t first = chunk % kBlocks * kPanelColumns;
      roundChunk(x + block * kMaxBlockRows * k, k,
                 std::min<int64_t>(kMaxBlockRows, m - block * kMaxBlockRows),
                 first,
                 reinterpret_cast<uint32_t *>(a + block * blockElements) +
                     first / 2 * kMaxBlockRows);
    }
#pragma omp barrier
    uint16_t *buffer = weights.isBorrowed()
                           ? scratch.threadPanels(int(thread), panelElements)
                           : nullptr;
    for (int64_t panel = panels * thread / threads,
                 end = panels * (thread + 1) / threads;
         panel < end; ++panel) {
      const uint16_t *b = buffer;
      if (buffer) {
        PanelUnpacker unpacker(weights, panel, buffer);
        unpacker.advance(unpacker.remaining());
      } else {
        b = weights.data.data() + panel * panelElements;
      }
      const int64_t column = panel * kPanelColumns;
      const int64_t width = std::min(kPanelColumns, n - column);
      float *out = y + (swiGlu ? panel * 16 : column);
      for (int64_t row = 0; row < m; row += kMaxBlockRows) {
        const int64_t rows = std::min<int64_t>(kMaxBlockRows, m - row);
        kKernels[rows - 1](
            reinterpret_cast<const uint32_t *>(a + row * paddedK), b, kBlocks,
            epilogue, out + row * yStride, yStride, width);
      }
    }
  }
}

} // namespace spanc::cpu
