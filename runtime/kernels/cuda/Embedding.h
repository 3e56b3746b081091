//===- Embedding.h - Token embedding lookup on CUDA devices ---------------===//
//
// The first op of a step: one row of the embedding table per token, into
// the f32 residual stream. The table lives on the device in bf16 (what the
// GGUF types dequantize to at load) or f32; ids are checked by the caller
// (the CPU path checks them before touching anything), and an id out of
// range reads zeros rather than another allocation.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_EMBEDDING_H
#define SPANC_RUNTIME_KERNELS_CUDA_EMBEDDING_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"

#include <cstdint>

namespace spanc::cuda {

/// A table of `numRows` rows of `dim` elements, `rowStride` apart; exactly
/// one of bf16Rows / f32Rows is set.
struct EmbeddingTable {
  const uint16_t *bf16Rows = nullptr;
  const float *f32Rows = nullptr;
  int64_t numRows = 0;
  int64_t dim = 0;
  int64_t rowStride = 0;
};

/// out[i][...] = table[ids[i]] as f32 for `count` ids (device memory),
/// output rows `outputStride` floats apart.
Status embeddingLookup(const EmbeddingTable &table, const int32_t *ids,
                       int64_t count, float *out, int64_t outputStride,
                       Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_EMBEDDING_H
