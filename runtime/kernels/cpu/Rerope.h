//===- Rerope.h - ReRoPE relocation of stored K blocks --------------------===//
//
// A span's K is stored rotated at the positions it was computed at. Reusing
// it `delta` positions later needs each rotating pair turned by delta*f_i:
// RoPE is a rotation per pair, so rotation(p + delta) = rotation(delta) *
// rotation(p) and one rotation by the delta relocates a block exactly (no
// inverse-then-forward pass). V carries no position and is only copied when
// the destination is another block. The kernel is a free function over raw
// per-layer pointers and strides, so it serves any block layout (token-major
// or dimension-major heads) without knowing KvStorage. It computes cos/sin
// once per distinct delta into one table per call, never per token.
//
// Elements are f32 or IEEE half (KvBlockLayout::precision). Half K is
// widened to f32, turned in f32 and rounded back to half (nearest even):
// the rotation applies to the f16-rounded K the cache holds, since nothing
// else is kept. A relocated element is therefore within one half rounding
// of K rotated directly at the target position and rounded once, and equal
// to the stored half turned exactly and rounded (both tested). f32 storage
// turns to within float rounding of direct rotation (tested to 1e-4).
// An op with delta 0 (a copy-on-write copy) copies bits and rounds nothing.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_REROPE_H
#define SPANC_RUNTIME_KERNELS_CPU_REROPE_H

#include "runtime/kernels/cpu/Half.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <vector>

namespace spanc::cpu {

/// Which dimensions form a rotating pair: Normal pairs (2i, 2i+1) (Llama),
/// NeoX pairs (i, i + rotaryDim/2) (Qwen2, GPT-NeoX).
enum class RopePairing { Normal, NeoX };

/// The rotation RoPE applies per position step: pair i turns by
/// `frequencies[i]` radians per position (theta^(-2i/rotaryDim), times any
/// scaling the model uses; YaRN's mixed frequencies go here as they are).
struct RopeRotation {
  RopePairing pairing = RopePairing::Normal;
  int rotaryDim = 0;                   ///< leading head dims that rotate
  const double *frequencies = nullptr; ///< rotaryDim/2 values
};

/// theta^(-2i/rotaryDim) * frequencyScale for i in [0, rotaryDim/2).
std::vector<double> ropeFrequencies(double theta, int rotaryDim,
                                    double frequencyScale = 1.0);

/// Where element (block, layer, head, token, dim) of K lies: at
/// `keyLayers[layer][block * blockStride + head * headStride + token *
/// tokenStride + dim * dimStride]`. V of (block, layer, head) is the
/// blockSize * headDim contiguous elements at `valueLayers[layer][block *
/// blockStride + head * headStride]`, in any order within (V is only
/// copied). All strides are in elements (float or half, per `precision`).
/// KvStorage (K dimension-major, V slot-major): tokenStride 1, dimStride
/// blockSize, headStride storage.headStride(), blockStride
/// storage.blockStride(), keyLayers[l] = storage.keyData(l, 0, 0),
/// valueLayers[l] = storage.valueData(l, 0, 0), precision
/// storage.precision().
struct KvBlockLayout {
  int numLayers = 0;
  int numKvHeads = 0;
  int headDim = 0;
  int blockSize = 0;
  int64_t blockStride = 0;
  int64_t headStride = 0;
  int64_t tokenStride = 0;
  int64_t dimStride = 0;
  KvPrecision precision = KvPrecision::F32;
};

/// One relocation: destination's K = source's K turned by `delta`
/// positions; when destination != source, V is copied too (a duplicate).
/// (The kernel's own copy of kv::RelocationOp, so the kernels stay below the
/// cache's bookkeeping.)
struct RelocationOp {
  uint32_t source = 0;
  uint32_t destination = 0;
  int64_t delta = 0;
};

/// Applies `ops` (one batch: no op may write a block another op of the batch
/// reads or writes, other than an in-place op on its own block). From 8 ops
/// (128 tokens) on, the calling thread and helper threads (HelperThreads.h,
/// up to the OpenMP thread limit) claim (op, layer) items 8 at a time, and
/// the call returns when every claimed item is done: a helper the OS runs
/// late delays the batch by at most its chunk, never by a barrier. Uses AVX-512
/// when the CPU has it and the layout allows (token-major or
/// dimension-major heads). keyLayers/valueLayers point at float or uint16_t
/// elements per layout.precision.
void relocateBlocks(const KvBlockLayout &layout, const RopeRotation &rotation,
                    void *const *keyLayers, void *const *valueLayers,
                    llvm::ArrayRef<RelocationOp> ops);

/// The same without AVX-512 (the scalar reference; also for benchmarks).
void relocateBlocksScalar(const KvBlockLayout &layout,
                          const RopeRotation &rotation, void *const *keyLayers,
                          void *const *valueLayers,
                          llvm::ArrayRef<RelocationOp> ops);

/// Whether relocateBlocks takes its AVX-512 path on this CPU and `layout`.
bool relocationUsesAvx512(const KvBlockLayout &layout,
                          const RopeRotation &rotation);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_REROPE_H
