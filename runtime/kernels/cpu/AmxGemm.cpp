//===- AmxGemm.cpp - bf16 weight GEMMs on AMX tiles -----------------------===//

#include "runtime/kernels/cpu/AmxGemm.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/PanelUnpacker.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cstring>

namespace spanc::cpu {

namespace {

constexpr int64_t kBlock = 32;      ///< rows of a micro-tile block, K step
constexpr int64_t kChunkRows = 256; ///< activation rows kept hot in L2
constexpr int64_t kBorrowedChunkRows = 512; ///< the same, unpacking
/// Row blocks each thread must have for the threads to split the rows.
constexpr int64_t kMinRowBlocksPerThread = 2;

/// The 64-byte operand of LDTILECFG (palette 1).
struct TileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t bytesPerRow[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

__attribute__((target("amx-tile"))) void configureTiles() {
  // Tiles 0-3: the 2x2 f32 accumulators; 4-5: A rows; 6-7: B columns. All
  // are 16 rows of 64 bytes.
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.bytesPerRow[tile] = 64;
    config.rows[tile] = 16;
  }
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void releaseTiles() { _tile_release(); }

/// The four products of K block `block` into the 2x2 accumulators (tiles
/// 0-3). Each load is issued right before its first product so that it
/// overlaps the previous product.
__attribute__((target("amx-tile,amx-bf16"), always_inline)) inline void
multiplyKBlock(const char *rows0, const char *rows16, int64_t aRowBytes,
               const uint16_t *panel, int64_t block) {
  const uint16_t *b = panel + block * 2 * kTileElements;
  _tile_loadd(4, rows0 + block * 64, aRowBytes);
  _tile_loadd(6, b, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_loadd(7, b + kTileElements, 64);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(5, rows16 + block * 64, aRowBytes);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

/// C[32][32] = A[32][K] * B-panel over kBlocks blocks of 32.
///
/// `next`, if given, unpacks another panel meanwhile, `rowsPerBlock` tile
/// rows after each block's products; without one the loop holds the
/// products alone.
///
/// `nextOut`, if given, is where the next block's epilogue writes (32 rows
/// of `nextOutFloats`, `nextOutStride` floats apart): its lines are fetched
/// for writing a few per K block, so that neither the tile stores nor the
/// epilogue's read-modify-write wait for lines that are not in the cache
/// (`spanc bench engine --prompt-tokens 512 --profile`, 2 threads, 6 pairs:
/// qkv 87-93 -> 79-82 ms, the other GEMMs 0-3 % faster).
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,"
                      "avx512bf16"))) void
multiplyBlock(const uint16_t *a, int64_t aRowBytes, const uint16_t *panel,
              int64_t kBlocks, float *c, int64_t cRowBytes,
              PanelUnpacker *next = nullptr, int64_t rowsPerBlock = 0,
              const float *nextOut = nullptr, int64_t nextOutFloats = 0,
              int64_t nextOutStride = 0) {
  const int64_t linesPerRow = (nextOutFloats + 15) / 16;
  const int64_t outLines = nextOut ? kBlock * linesPerRow : 0;
  const int64_t linesPerKBlock = (outLines + kBlocks - 1) / kBlocks;
  int64_t line = 0;
  auto fetchNextOut = [&] {
    for (int64_t i = 0; i < linesPerKBlock && line < outLines; ++i, ++line)
      _mm_prefetch(reinterpret_cast<const char *>(
                       nextOut + line / linesPerRow * nextOutStride +
                       line % linesPerRow * 16),
                   _MM_HINT_ET0);
  };
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const char *rows0 = reinterpret_cast<const char *>(a);
  const char *rows16 = rows0 + 16 * aRowBytes;
  if (!next) {
    for (int64_t block = 0; block < kBlocks; ++block) {
      multiplyKBlock(rows0, rows16, aRowBytes, panel, block);
      fetchNextOut();
    }
  } else {
    for (int64_t block = 0; block < kBlocks; ++block) {
      multiplyKBlock(rows0, rows16, aRowBytes, panel, block);
      fetchNextOut();
      next->advance(rowsPerBlock);
    }
  }
  char *out = reinterpret_cast<char *>(c);
  _tile_stored(0, out, cRowBytes);
  _tile_stored(1, out + 64, cRowBytes);
  _tile_stored(2, out + 16 * cRowBytes, cRowBytes);
  _tile_stored(3, out + 16 * cRowBytes + 64, cRowBytes);
}

/// Rounds rows [first, end) of x into the padded bf16 scratch (zeros past K
/// and, for the padding rows, everywhere).
void convertRows(const float *x, int64_t m, int64_t k, int64_t paddedK,
                 int64_t first, int64_t end, uint16_t *out) {
  for (int64_t row = first; row < end; ++row) {
    uint16_t *destination = out + row * paddedK;
    if (row < m) {
      convertToBf16(x + row * k, destination, k);
      std::fill(destination + k, destination + paddedK, uint16_t(0));
    } else {
      std::fill(destination, destination + paddedK, uint16_t(0));
    }
  }
}

/// Applies a non-Store epilogue to a finished block held in `block` (32
/// rows of 32), of which `height` rows and `width` columns are real.
SPANC_AVX512 void finishBlock(AmxEpilogue epilogue, const float *block,
                              int64_t height, int64_t width, float *y,
                              int64_t yStride) {
  for (int64_t r = 0; r < height; ++r) {
    const float *products = block + r * kBlock;
    float *out = y + r * yStride;
    if (epilogue == AmxEpilogue::SwiGlu) {
      // Columns 0-15: gate, 16-31: up, of the same 16 outputs.
      _mm512_storeu_ps(out, swiGlu512(_mm512_load_ps(products),
                                      _mm512_load_ps(products + 16)));
      continue;
    }
    int64_t c = 0;
    for (; c + 16 <= width; c += 16)
      _mm512_storeu_ps(out + c, _mm512_add_ps(_mm512_loadu_ps(out + c),
                                              _mm512_load_ps(products + c)));
    for (; c < width; ++c)
      out[c] += products[c];
  }
}

} // namespace

AmxWeights packAmxWeights(const float *matrix, int64_t rows, int64_t columns) {
  AmxWeights weights;
  weights.rows = rows;
  weights.columns = columns;
  weights.paddedRows = roundUp(rows, kBlock);
  weights.paddedColumns = roundUp(columns, kBlock);
  const int64_t kBlocks = weights.paddedColumns / kBlock;
  const int64_t panels = weights.paddedRows / kBlock;
  weights.data.resize(size_t(weights.paddedRows * weights.paddedColumns));
  uint16_t *data = weights.data.data();
#pragma omp parallel for schedule(static)
  for (int64_t panel = 0; panel < panels; ++panel) {
    uint16_t values[kBlock];
    for (int64_t block = 0; block < kBlocks; ++block) {
      // Row n of W at K values [32 block, 32 block + 32) becomes column n % 16
      // of tile (n % 32) / 16: its K pairs, 4 bytes each, 64 bytes apart.
      uint16_t *tiles = data + (panel * kBlocks + block) * 2 * kTileElements;
      const int64_t first = block * kBlock;
      const int64_t count =
          std::max<int64_t>(0, std::min(kBlock, columns - first));
      for (int64_t lane = 0; lane < kBlock; ++lane) {
        const int64_t n = panel * kBlock + lane;
        std::fill(values, values + kBlock, uint16_t(0));
        if (n < rows && count > 0)
          convertToBf16(matrix + n * columns + first, values, count);
        uint16_t *column =
            tiles + (lane / 16) * kTileElements + (lane % 16) * 2;
        for (int64_t pair = 0; pair < kBlock / 2; ++pair) {
          column[pair * 32] = values[2 * pair];
          column[pair * 32 + 1] = values[2 * pair + 1];
        }
      }
    }
  }
  return weights;
}

AmxWeights packAmxGatedWeights(const float *matrix, int64_t rows,
                               int64_t columns) {
  // Row order of the pack: per 16 outputs, their 16 gate rows, then their
  // 16 up rows.
  const int64_t half = rows / 2;
  std::vector<float> interleaved(static_cast<size_t>(rows * columns));
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t group = row / kBlock, lane = row % kBlock;
    const int64_t source = (lane < 16 ? 0 : half) + group * 16 + (lane % 16);
    std::memcpy(interleaved.data() + row * columns, matrix + source * columns,
                sizeof(float) * size_t(columns));
  }
  AmxWeights weights = packAmxWeights(interleaved.data(), rows, columns);
  weights.gated = true;
  return weights;
}

AmxWeights borrowAmxWeights(const PackedQuantMatrix &matrix, bool gated) {
  assert((!gated || matrix.rows % 32 == 0) &&
         "the SwiGLU epilogue takes gated weights of 32-row panels");
  AmxWeights weights;
  weights.rows = matrix.rows;
  weights.columns = matrix.columns;
  weights.paddedRows = roundUp(matrix.rows, kBlock);
  weights.paddedColumns = matrix.columns; // whole blocks of 32
  weights.gated = gated;
  weights.quant = {matrix.format, matrix.blocks, matrix.groups,
                   matrix.bytes.data()};
  return weights;
}

void amxGemm(const AmxWeights &weights, const float *x, int64_t m, float *y,
             AmxScratch &scratch, AmxEpilogue epilogue) {
  const int64_t n = weights.rows, k = weights.columns;
  // y's row stride; a SwiGLU block of 32 products yields 16 outputs.
  const bool swiGlu = epilogue == AmxEpilogue::SwiGlu;
  assert(swiGlu == weights.gated && "gated packs need the SwiGLU epilogue");
  const int64_t yStride = swiGlu ? n / 2 : n;
  const int64_t paddedK = weights.paddedColumns;
  const int64_t paddedM = roundUp(m, kBlock);
  const int64_t kBlocks = paddedK / kBlock;
  const int64_t panels = weights.paddedRows / kBlock;
  if (scratch.activations.size() < size_t(paddedM * paddedK))
    scratch.activations.resize(size_t(paddedM * paddedK));
  uint16_t *a = scratch.activations.data();
  const int64_t aRowBytes = paddedK * 2;
  const int64_t panelElements = kBlocks * 2 * kTileElements;
  if (weights.isBorrowed())
    scratch.reservePanelThreads(omp_get_max_threads());
  // A borrowed panel is unpacked once per item: fewer, larger chunks (all
  // of a 512-row prompt's rows) unpack it fewer times, as long as the
  // chunk's activations stay well inside L2 (768 KiB: 512 rows at K = 576,
  // 256 at K = 1 536).
  const int64_t chunkRows =
      weights.isBorrowed() && paddedK * 2 * kBorrowedChunkRows <= (768 << 10)
          ? kBorrowedChunkRows
          : kChunkRows;

  // Enough rows for every thread to have kMinRowBlocksPerThread blocks of
  // 32: each thread rounds and multiplies its own rows by every panel, so
  // its activations never leave its core's L2 (with every thread reading
  // every row, two threads ran each item ~1.45x slower than one, and the
  // GEMMs scaled 1.15-1.5x; split by rows, 2x). Fewer rows: the threads
  // share the panels instead, each unpacking half of them; with one block
  // a thread, every thread unpacked every panel, and a 64-row hit's GEMMs
  // cost 2.1x a 32-row one's (gemm_bench, M = 56-96: 13-15 % faster
  // shared; from 4 blocks a thread on, the same).
  const int64_t maxThreads = omp_get_max_threads();
  const bool splitRows =
      paddedM / kBlock >= maxThreads * kMinRowBlocksPerThread;

#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    alignas(64) float edge[kBlock * kBlock];
    // Multiplies rows [chunk, chunkEnd) by panel `panel` held in `b`,
    // unpacking `next` (if any) meanwhile, spread evenly over the
    // products, or `rowsPerBlock` tile rows after each block's.
    auto multiplyPanel = [&](int64_t chunk, int64_t chunkEnd, int64_t panel,
                             const uint16_t *b, PanelUnpacker *next,
                             int64_t rowsPerBlock = 0) {
      const int64_t rowBlocks = (chunkEnd - chunk) / kBlock;
      if (next && rowsPerBlock == 0)
        rowsPerBlock = (next->remaining() + rowBlocks * kBlocks - 1) /
                       (rowBlocks * kBlocks);
      const int64_t column = panel * kBlock;
      const int64_t width = std::min(kBlock, n - column);
      float *out = y + (swiGlu ? panel * 16 : column);
      for (int64_t row = chunk; row < chunkEnd; row += kBlock) {
        const int64_t height = std::min(kBlock, m - row);
        const uint16_t *rows = a + row * paddedK;
        // The next block of this panel's rows, when it is whole.
        const int64_t nextRow = row + kBlock;
        const float *nextOut = nextRow + kBlock <= m && nextRow < chunkEnd
                                   ? out + nextRow * yStride
                                   : nullptr;
        const int64_t outFloats = swiGlu ? 16 : width;
        if (epilogue == AmxEpilogue::Store && height == kBlock &&
            width == kBlock) {
          multiplyBlock(rows, aRowBytes, b, kBlocks, out + row * yStride,
                        yStride * 4, next, rowsPerBlock, nextOut, outFloats,
                        yStride);
          continue;
        }
        // The block goes through a local tile; only its real part reaches
        // y.
        multiplyBlock(rows, aRowBytes, b, kBlocks, edge, kBlock * 4, next,
                      rowsPerBlock, nextOut, outFloats, yStride);
        if (epilogue == AmxEpilogue::Store) {
          for (int64_t r = 0; r < height; ++r)
            std::memcpy(out + (row + r) * yStride, edge + r * kBlock,
                        sizeof(float) * size_t(width));
          continue;
        }
        finishBlock(epilogue, edge, height, width, out + row * yStride,
                    yStride);
      }
    };
    // Borrowed panels are unpacked into two buffers a thread: the thread's
    // next (chunk, panel) item unpacks under the tile products of the one
    // before. `claim` hands out the thread's items in order, -1 past them.
    uint16_t *buffers[2] = {nullptr, nullptr};
    if (weights.isBorrowed()) {
      buffers[0] = scratch.threadPanels(int(thread), 2 * panelElements);
      buffers[1] = buffers[0] + panelElements;
    }
    auto runBorrowed = [&](auto claim, auto rowsOf) {
      int64_t item = claim();
      if (item < 0)
        return;
      {
        PanelUnpacker first(weights, item % panels, buffers[0]);
        first.advance(first.remaining());
      }
      for (int current = 0; item >= 0; current ^= 1) {
        const int64_t following = claim();
        int64_t chunk, chunkEnd;
        rowsOf(item, chunk, chunkEnd);
        if (following < 0) {
          multiplyPanel(chunk, chunkEnd, item % panels, buffers[current],
                        nullptr);
          break;
        }
        PanelUnpacker next(weights, following % panels, buffers[current ^ 1]);
        multiplyPanel(chunk, chunkEnd, item % panels, buffers[current], &next);
        next.advance(next.remaining()); // what rounding left
        item = following;
      }
    };

    // The rows this thread multiplies: its own blocks of 32 when the
    // threads split the rows (no barrier: no other thread reads them),
    // else all of them, rounded by all threads first.
    int64_t rowBegin = 0, rowEnd = paddedM;
    if (splitRows) {
      const int64_t blocks = paddedM / kBlock;
      rowBegin = blocks * thread / threads * kBlock;
      rowEnd = blocks * (thread + 1) / threads * kBlock;
      convertRows(x, m, k, paddedK, rowBegin, rowEnd, a);
    } else {
      const int64_t rowsPerThread = (paddedM + threads - 1) / threads;
      convertRows(x, m, k, paddedK, std::min(paddedM, thread * rowsPerThread),
                  std::min(paddedM, (thread + 1) * rowsPerThread), a);
#pragma omp barrier
    }
    configureTiles();
    // Work items are (chunk of those rows, panel), chunk by chunk.
    const int64_t chunks = (rowEnd - rowBegin + chunkRows - 1) / chunkRows;
    const int64_t items = chunks * panels;
    auto rowsOf = [&](int64_t item, int64_t &chunk, int64_t &chunkEnd) {
      chunk = rowBegin + item / panels * chunkRows;
      chunkEnd = std::min(rowEnd, chunk + chunkRows);
    };
    auto multiplyCopied = [&](int64_t item) {
      int64_t chunk, chunkEnd;
      rowsOf(item, chunk, chunkEnd);
      multiplyPanel(chunk, chunkEnd, item % panels,
                    weights.data.data() + item % panels * panelElements,
                    nullptr);
    };
    // The items this thread multiplies, in order: every item of its own
    // rows when the threads split the rows, else a contiguous run of the
    // shared ones. Handed out one at a time (a shared counter),
    // neighbouring panels went to different cores, whose prefetchers then
    // streamed neither, and the GEMMs of a 32-row hit ran no faster on two
    // threads than on one (gemm_bench, M = 32: gate|up 0.117 ms one at a
    // time, 0.081 ms in runs).
    int64_t nextItem = splitRows ? 0 : items * thread / threads;
    const int64_t endItem = splitRows ? items : items * (thread + 1) / threads;
    auto claim = [&] { return nextItem < endItem ? nextItem++ : int64_t(-1); };
    if (!weights.isBorrowed()) {
      for (int64_t item = claim(); item >= 0; item = claim())
        multiplyCopied(item);
    } else if (paddedM == kBlock) {
      // One block of rows (never split: that takes two a thread): a panel's
      // products are too few to hide the unpacking of the next panel, and tiles
      // unpacked a whole panel before their products come back from L2. Each
      // panel is unpacked kAheadBlocks K blocks ahead of its own products
      // instead, so that its B tiles are loaded from L1 just after their
      // stores.
      constexpr int64_t kAheadBlocks = 2, kRowsPerKBlock = 2 * 16;
      for (int64_t item = claim(); item >= 0; item = claim()) {
        PanelUnpacker panel(weights, item % panels, buffers[0]);
        panel.advance(kAheadBlocks * kRowsPerKBlock);
        multiplyPanel(0, kBlock, item % panels, buffers[0], &panel,
                      kRowsPerKBlock);
      }
    } else {
      runBorrowed(claim, rowsOf);
    }
    releaseTiles();
  }
}

} // namespace spanc::cpu
