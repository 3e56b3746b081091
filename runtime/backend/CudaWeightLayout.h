//===- CudaWeightLayout.h - Where each weight lives in the device arena ---===//
//
// The CUDA backend keeps a model's weights in one device allocation: every
// projection as a row-major bf16 matrix (the cuBLASLt GEMMs' operand), Q|K|V
// fused into one matrix and gate|up into another as the CPU backend fuses
// them (runtime/model/Weights.h), so a layer runs four GEMMs; norms and
// biases as f32 vectors. At load each GGUF tensor is either uploaded raw
// into a staging buffer and dequantized to bf16 there by a kernel, or, for
// a type no kernel reads, converted to bf16 on the host and uploaded.
// This file plans all of that — which tensors, their checked shapes, every
// destination offset (256-byte aligned), the staging size — as plain C++,
// tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDAWEIGHTLAYOUT_H
#define SPANC_RUNTIME_BACKEND_CUDAWEIGHTLAYOUT_H

#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spanc::backend {

/// A row-major bf16 matrix in the arena: rows x columns, byte offset.
struct DeviceMatrix {
  uint64_t offset = 0;
  uint64_t rows = 0, columns = 0;
  uint64_t bytes() const { return rows * columns * 2; }
};

/// An f32 vector in the arena (empty: size 0).
struct DeviceVector {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool empty() const { return size == 0; }
};

/// One GGUF tensor's way into the arena.
struct TensorConversion {
  const model::GgufTensor *tensor = nullptr;
  /// true: its raw bytes go to the staging buffer and a kernel
  /// dequantizes them; false: the host converts (to bf16 for a matrix,
  /// f32 for a vector) and uploads.
  bool onDevice = false;
  /// A matrix's rows land at `firstRow` of `matrix` (fused matrices take
  /// several tensors); a vector fills `vector`.
  bool isMatrix = true;
  DeviceMatrix matrix;
  uint64_t firstRow = 0;
  DeviceVector vector;
};

struct CudaLayerWeights {
  DeviceVector attentionNorm, feedForwardNorm;
  /// Rows: numHeads*headDim of Q, then numKvHeads*headDim of K, then V.
  DeviceMatrix queryKeyValue;
  DeviceVector queryKeyValueBias; ///< same rows; empty without bias
  DeviceMatrix attentionOutput;   ///< [embeddingDim][numHeads*headDim]
  /// Rows: feedForwardDim of gate, then feedForwardDim of up.
  DeviceMatrix gateUp;
  DeviceMatrix down; ///< [embeddingDim][feedForwardDim]
};

struct CudaWeightLayout {
  static constexpr uint64_t kAlignment = 256;

  DeviceMatrix embedding; ///< [vocabSize][embeddingDim]
  std::vector<CudaLayerWeights> layers;
  DeviceVector outputNorm;
  /// [vocabSize][embeddingDim]; the embedding itself when tied.
  DeviceMatrix output;
  /// Bytes of the arena.
  uint64_t arenaBytes = 0;
  /// Bytes of the largest raw tensor a kernel dequantizes (the staging
  /// buffer), and of the largest host conversion (its pinned buffer).
  uint64_t stagingBytes = 0, hostConversionBytes = 0;
  /// Every tensor, in arena order.
  std::vector<TensorConversion> conversions;
};

/// Plans the arena for `config`'s tensors in `file`. `deviceReads(type)`
/// says which GGUF types the dequantization kernel reads. Errors name the
/// tensor (missing, wrong shape, a type nobody can convert).
llvm::Expected<CudaWeightLayout>
planCudaWeights(const model::GgufFile &file, const model::ModelConfig &config,
                llvm::function_ref<bool(model::GgmlType)> deviceReads);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDAWEIGHTLAYOUT_H
