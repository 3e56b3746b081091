//===- Dequantize.h - GGUF blocks to bf16 (or f32) on the device ----------===//
//
// Weights are uploaded in their GGUF blocks and expanded on the GPU at load
// time (a Llama-3-8B Q4_K file is a fifth of its bf16 size to move). The
// types are those the CPU loader dequantizes (model::canDequantize): F32,
// F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K, with ggml's ids so the backend
// casts model::GgmlType directly. The per-block arithmetic lives in
// DequantizeMath.h, shared with a host test against model::dequantizeRow.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZE_H
#define SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZE_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"

#include <cstdint>

namespace spanc::cuda {

/// ggml tensor type ids (model::GgmlType) of the types dequantized here.
enum class QuantType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  Q4_K = 12,
  Q6_K = 14,
  BF16 = 30,
};

/// Whether `typeId` (a ggml type id) is one of the types above.
bool canDequantizeOnDevice(uint32_t typeId);
/// Elements per block (1 for F32/F16/BF16, 32 or 256 else); 0 if unknown.
int quantBlockElements(QuantType type);
/// Bytes per block; 0 if unknown.
int quantBlockBytes(QuantType type);

/// destination[i] = the bf16 (round to nearest even) of element i of the
/// `count` elements at `source` (GGUF blocks of `type`, device memory);
/// `count` must be a whole number of blocks. One launch.
Status dequantizeToBf16(QuantType type, const void *source, int64_t count,
                        uint16_t *destination, Stream stream);
/// The same into f32 (norm weights, biases, an f32 embedding table).
Status dequantizeToF32(QuantType type, const void *source, int64_t count,
                       float *destination, Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_DEQUANTIZE_H
