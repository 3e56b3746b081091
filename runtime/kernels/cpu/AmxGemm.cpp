//===- AmxGemm.cpp - bf16 weight GEMMs on AMX tiles -----------------------===//

#include "runtime/kernels/cpu/AmxGemm.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Gemm.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cstring>

namespace spanc::cpu {

namespace {

constexpr int64_t kBlock = 32;         ///< rows of a micro-tile block, K step
constexpr int64_t kChunkRows = 256;    ///< activation rows kept hot in L2
constexpr int64_t kTileElements = 512; ///< bf16 values in one 1 KiB tile

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

/// C[32][32] = A[32][K] * B-panel over kBlocks blocks of 32. Each load is
/// issued right before its first product so that it overlaps the previous
/// product.
__attribute__((target("amx-tile,amx-bf16"))) void
multiplyBlock(const uint16_t *a, int64_t aRowBytes, const uint16_t *panel,
              int64_t kBlocks, float *c, int64_t cRowBytes) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const char *rows0 = reinterpret_cast<const char *>(a);
  const char *rows16 = rows0 + 16 * aRowBytes;
  for (int64_t block = 0; block < kBlocks; ++block) {
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

#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    // Every thread multiplies every row, so all rows are rounded first.
    const int64_t rowsPerThread = (paddedM + threads - 1) / threads;
    convertRows(x, m, k, paddedK, std::min(paddedM, thread * rowsPerThread),
                std::min(paddedM, (thread + 1) * rowsPerThread), a);
#pragma omp barrier
    // Work items are (chunk of rows, panel), chunk by chunk, handed out
    // dynamically: the two cores' tile throughput drifts apart for seconds
    // at a time on a shared host, and a static split waits for the slower.
    configureTiles();
    alignas(64) float edge[kBlock * kBlock];
    const int64_t chunks = (paddedM + kChunkRows - 1) / kChunkRows;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t item = 0; item < chunks * panels; ++item) {
      const int64_t chunk = item / panels * kChunkRows, panel = item % panels;
      const int64_t chunkEnd = std::min(paddedM, chunk + kChunkRows);
      const uint16_t *b =
          weights.data.data() + panel * kBlocks * 2 * kTileElements;
      const int64_t column = panel * kBlock;
      const int64_t width = std::min(kBlock, n - column);
      float *out = y + (swiGlu ? panel * 16 : column);
      for (int64_t row = chunk; row < chunkEnd; row += kBlock) {
        const int64_t height = std::min(kBlock, m - row);
        const uint16_t *rows = a + row * paddedK;
        if (epilogue == AmxEpilogue::Store && height == kBlock &&
            width == kBlock) {
          multiplyBlock(rows, aRowBytes, b, kBlocks, out + row * yStride,
                        yStride * 4);
          continue;
        }
        // The block goes through a local tile; only its real part reaches
        // y.
        multiplyBlock(rows, aRowBytes, b, kBlocks, edge, kBlock * 4);
        if (epilogue == AmxEpilogue::Store) {
          for (int64_t r = 0; r < height; ++r)
            std::memcpy(out + (row + r) * yStride, edge + r * kBlock,
                        sizeof(float) * size_t(width));
          continue;
        }
        finishBlock(epilogue, edge, height, width, out + row * yStride,
                    yStride);
      }
    }
    releaseTiles();
  }
}

} // namespace spanc::cpu
