//===- CudaBackend.h - The CUDA backend: the forward pass on one GPU ------===//
//
// The second Backend (docs/ARCHITECTURE.md, "Devices"): the K/V pool lives
// in GPU memory with backend::KvStorage's block layout, the weights are
// uploaded at load in their GGUF blocks and dequantized to bf16 there
// (CudaWeightLayout), and a step runs on one stream: the embedding, per
// layer RMSNorm, the fused Q|K|V GEMM (cuBLASLt, bf16 in, f32 out, one
// algorithm per shape whatever its rows, so rows round alike in any step),
// RoPE, the K/V write, paged attention over each sequence's page list (rope in
// the kernel, or K stored rotated), the output projection added into the
// residual stream, RMSNorm, gate|up, SwiGLU, down; then the final norm and
// the logits of the rows that ask, copied back. Relocations run a CIDRA
// plan's batches, one launch each. The kernels are runtime/kernels/cuda's;
// everything decided on the host is in CudaStepLayout, CudaWeightLayout
// and CudaRelocationLayout, tested without a GPU.
//
// Not done here, refused with an error: span scaling (temperature or mass
// scale other than 1) and llama.cpp numerics (Numerics::LlamaCpp), both
// CPU-only.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDABACKEND_H
#define SPANC_RUNTIME_BACKEND_CUDABACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/CudaDevice.h"
#include "runtime/backend/CudaWeightLayout.h"
#include "runtime/model/Model.h"

#include <cstdint>
#include <memory>

namespace spanc::backend {

class CudaBackend final : public Backend {
public:
  /// Finds the GPU (probeCudaDevice), uploads `model`'s weights and
  /// reserves `numBlocks` K/V blocks of `blockSize` tokens, K stored
  /// rotated (ReRoPE) or not (rope-in-kernel). `model` may have been
  /// loaded without host weights (ModelOptions::hostWeights).
  static llvm::Expected<std::unique_ptr<CudaBackend>>
  create(model::Model &model, int64_t numBlocks, unsigned blockSize,
         bool keysRotated, int deviceOrdinal = 0);
  ~CudaBackend() override;

  void tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                      llvm::ArrayRef<int32_t> b,
                      llvm::ArrayRef<int32_t> validTokens,
                      std::vector<float> &distances) override;
  /// relocate and copyBlock cannot return an error (the Backend seam);
  /// a failure is kept and returned by the next forward.
  void relocate(const kv::RelocationPlan &plan) override;
  void copyBlock(const kv::RelocationOp &copy) override;

  const CudaDeviceInfo &device() const;
  const CudaWeightLayout &weightLayout() const;
  /// Waits for everything queued (benchmarks time relocations with it)
  /// and returns a relocation's or copy's kept failure.
  llvm::Error synchronize() override;

  struct State;

private:
  explicit CudaBackend(std::unique_ptr<State> state);
  StepLimits stepLimits() const override;
  uint32_t numLayers() const override;
  llvm::Error runStep(const StepLayout &step, model::ForwardOutput *output,
                      uint32_t numLayers) override;
  /// Device time per op from CUDA events between the ops (the stream is
  /// waited for at the end of each timed step).
  void enableOpTimers(bool enabled) override;
  ForwardProfile opProfile() const override;
  void resetOpProfile() override;

  std::unique_ptr<State> state;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDABACKEND_H
