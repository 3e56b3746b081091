//===- AmxGemm.h - bf16 weight GEMMs on AMX tiles -------------------------===//
//
// y[M][N] = x[M][K] * W^T with W in bf16, products summed in f32 by AMX
// TDPBF16PS. Prefill's GEMMs are short in K (576 to 1 536 in the models we
// run), where oneDNN 2.6's brgemm reaches ~0.7 TFLOP/s per core on a CPU
// whose tiles multiply at ~2.6: it loads all four operand tiles of a 2x2
// block before the first product, so loads and products never overlap.
// This kernel issues each tile load right before the first product that
// needs it (A0 B0 C00, B1 C01, A1 C10 C11), so the next load runs under the
// previous product.
//
// Layout. W is packed once into panels of 32 output columns; a panel holds,
// for each block of 32 K values, two B tiles (columns 0-15, then 16-31), each
// 16 rows of K pairs x 16 columns x 2 values (AMX's VNNI order), 1 KiB, so a
// panel streams contiguously. N and K are padded to multiples of 32 with
// zeros. Activations are rounded to bf16 per call into a scratch of
// rows padded to 32 and K padded to 32.
//
// Threads. With at least one block of 32 rows a thread, each thread
// rounds its own contiguous rows to bf16 and multiplies them by every
// panel, so its activations never leave its core's L2. Handing (chunk,
// panel) items to whichever thread was free made every thread read every
// row: each item then ran ~1.45x slower with two threads than with one,
// and the GEMMs scaled 1.15-1.5x on the 2-vCPU AMX host; split by rows
// they scale ~2x (gemm_bench, M = 512: qkv 0.58 -> 0.28 ms, the copy's
// products now beside oneDNN's; `spanc bench engine` pp512 4 400 -> 5 500
// tokens/s). The split is static, so a core slowed by a neighbour on a
// shared host delays the call (dynamic items absorbed that; the figures
// above are medians on such a host). A call of fewer rows (a span hit's
// 28) shares the panels between the threads instead (items from a shared
// counter).
//
// Borrowed weights. A bf16 copy of every projection costs 2 bytes a weight
// (SmolLM2: ~210 MB; an 8B model: 14 GiB) beside the 4/8-bit copy decode
// reads. Weights borrowed from that copy (borrowAmxWeights) keep no bf16 of
// their own: a work item (a chunk of rows times one panel) multiplies by a
// panel unpacked into a per-thread buffer (96 KiB at K = 1 536, in L2)
// while it unpacks the panel of the thread's next item into a second one,
// a few tile rows after each block's products, so that the vector units
// unpack while the tile unit multiplies. Split by rows, every thread
// unpacks every panel (once per chunk of its rows). The unpacked values
// are the bf16 rounding of the file's dequantized f32 (the GGUF reader's
// q * d + m: q * d is exact in f32, so one FMA rounds as its multiply,
// then add), so a borrowed pack and packAmxWeights of the dequantized
// matrix give the same bits. Unpacking costs ~0.1-0.2 ns a weight (a
// dozen vector instructions a tile row) once per panel and chunk of rows
// and overlaps the products only in part, yet a 512-token SmolLM2
// prefill runs about as fast as from a copy since the row split (the
// copy's threads each read every bf16 weight from memory; it was ~7 %
// slower before).
// A call of at most 32 rows (a span hit's, a short tail's) has too few
// products to hide the next panel's unpacking, and a panel unpacked that
// far ahead is read back from L2: each panel is unpacked whole tiles at a
// time two K blocks ahead of its own products instead (gemm_bench, M = 28,
// one thread: gate|up 0.30 -> 0.20 ms; a hit's GEMMs 15.9 -> 12.6 ms at 8
// documents; docs/ARCHITECTURE.md, "Memory").
//
// Epilogues. Each finished 32x32 block is stored, added to y (the residual
// connection), or, for gated weights, turned into SwiGLU outputs: a gated
// pack of a [gate; up] matrix puts gate rows 16p..16p+15 in panel p's first
// tile and the same up rows in its second, so a block holds both halves of
// 16 outputs and the gate|up products never reach memory.
//
// Numerics. Every output sums its K products in one fixed order (block by
// block into one accumulator tile), whatever M is and wherever the row sits
// in the batch: a row's result never depends on the other rows, which the
// span cache's hit = miss contract relies on.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_AMXGEMM_H
#define SPANC_RUNTIME_KERNELS_CPU_AMXGEMM_H

#include "runtime/kernels/cpu/AlignedAllocator.h"
#include "runtime/kernels/cpu/QuantGemv.h"

#include <cstdint>
#include <vector>

namespace spanc::cpu {

/// The 4/8-bit tiles of a PackedQuantMatrix that borrowed weights unpack.
struct AmxQuantSource {
  QuantFormat format = QuantFormat::Q4_1;
  int64_t blocks = 0;             ///< of 32 weights a row
  int64_t groups = 0;             ///< of 16 rows
  const uint8_t *bytes = nullptr; ///< PackedQuantMatrix::bytes
};

/// A [rows][columns] weight matrix in AMX B-tile panels (see the header),
/// owned, or borrowed from 4/8-bit tiles and unpacked per call.
struct AmxWeights {
  int64_t rows = 0;          ///< N
  int64_t columns = 0;       ///< K
  int64_t paddedRows = 0;    ///< N rounded up to 32
  int64_t paddedColumns = 0; ///< K rounded up to 32
  bool gated = false;        ///< panels hold [gate; up] for SwiGLU
  /// The owned panels; empty when borrowed.
  std::vector<uint16_t, AlignedAllocator<uint16_t>> data;
  AmxQuantSource quant; ///< bytes != null: borrowed

  bool isBorrowed() const { return quant.bytes != nullptr; }
  /// Bytes owned (borrowed tiles belong to their PackedQuantMatrix).
  int64_t sizeInBytes() const { return int64_t(data.size() * 2); }
};

/// Packs a row-major [rows][columns] f32 matrix, rounding to bf16 (nearest
/// even).
AmxWeights packAmxWeights(const float *matrix, int64_t rows, int64_t columns);

/// Packs a [gate; up] matrix (rows/2 gate rows, then as many up rows) for
/// the SwiGLU epilogue; rows must be a multiple of 32.
AmxWeights packAmxGatedWeights(const float *matrix, int64_t rows,
                               int64_t columns);

/// Weights that unpack `matrix`'s tiles per call instead of holding bf16.
/// They point at matrix.bytes' buffer, which must outlive them (moving the
/// PackedQuantMatrix keeps it). `gated`: matrix stacks [gate; up] as for
/// packAmxGatedWeights; rows must then be a multiple of 32. Requires
/// avx512bf16 (every AMX-BF16 CPU has it).
AmxWeights borrowAmxWeights(const PackedQuantMatrix &matrix, bool gated);

/// What amxGemm does with the products P = x * W^T.
enum class AmxEpilogue {
  Store,      ///< y = P
  Accumulate, ///< y += P
  SwiGlu,     ///< y = silu(P_gate) * P_up, rows/2 columns (gated weights)
};

/// Per-call scratch (the bf16 activations; the unpacked panels of
/// borrowed weights, one buffer per thread); reused across calls.
struct AmxScratch {
  using Buffer = std::vector<uint16_t, AlignedAllocator<uint16_t>>;
  Buffer activations;
  /// Each thread's own allocation, grown by that thread, whose address
  /// does not move with the call's K. One array cut at thread x panel
  /// size put thread 1's buffer at a K-dependent offset, where on a Zen 4
  /// it ran each 28-row call ~15 % slower than thread 0's (both ~100 us
  /// with their own; docs/ARCHITECTURE.md, "CPU GEMMs").
  std::vector<Buffer> panels;

  /// Makes room for a buffer a thread (before the threads start).
  void reservePanelThreads(int threads) {
    if (panels.size() < size_t(threads))
      panels.resize(size_t(threads));
  }
  /// Thread `thread`'s buffer of at least `elements` (called by that
  /// thread, after reservePanelThreads).
  uint16_t *threadPanels(int thread, int64_t elements) {
    Buffer &buffer = panels[size_t(thread)];
    if (buffer.size() < size_t(elements))
      buffer.resize(size_t(elements));
    return buffer.data();
  }
};

/// y[M][N] = x[M][K] * W^T (or the epilogue's function of it); x has K
/// floats per row, y N floats per row (N/2 for SwiGlu). Runs on the OpenMP
/// threads of the caller. Requires amxBf16Usable() (CpuFeatures.h).
void amxGemm(const AmxWeights &weights, const float *x, int64_t m, float *y,
             AmxScratch &scratch, AmxEpilogue epilogue = AmxEpilogue::Store);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_AMXGEMM_H
