//===- Gemm.h - bf16 GEMMs through cuBLASLt -------------------------------===//
//
// Every projection of the forward pass is Y[m][n] = X[m][k] . W[n][k]^T
// with row-major X, W and Y (W as the GGUF file stores a projection: one
// row per output feature), bf16 inputs, f32 accumulation, and a bf16 or
// f32 output that may be added to (the residual stream). One GemmEngine
// owns the cuBLASLt handle and its workspace, and caches the algorithm the
// heuristic picks per problem shape so a step's repeated shapes pay the
// query once.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_GEMM_H
#define SPANC_RUNTIME_KERNELS_CUDA_GEMM_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace spanc::cuda {

enum class GemmOutputType { Bf16, F32 };

/// Y = X . W^T (+ Y when `accumulate`), all device memory.
struct GemmProblem {
  int64_t rows = 0;            ///< m: rows of X and Y (tokens)
  int64_t columns = 0;         ///< n: rows of W, columns of Y (output features)
  int64_t depth = 0;           ///< k: columns of X and W
  const uint16_t *x = nullptr; ///< bf16 bits, row-major
  int64_t xStride = 0;         ///< elements between rows of X (>= depth)
  const uint16_t *w = nullptr; ///< bf16 bits, row-major [columns][depth]
  int64_t wStride = 0;         ///< elements between rows of W (>= depth)
  void *y = nullptr;           ///< bf16 bits or f32, per outputType
  int64_t yStride = 0;         ///< elements between rows of Y (>= columns)
  GemmOutputType outputType = GemmOutputType::F32;
  /// Y += X . W^T (beta 1) instead of Y = X . W^T.
  bool accumulate = false;
};

struct GemmOptions {
  /// The default workspace: what cuBLASLt's Hopper kernels ask for at most.
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;
  size_t workspaceBytes = kDefaultWorkspaceBytes;
  /// Run every problem of one shape but its rows (columns, depth, strides,
  /// output type, beta, alignment) with ONE algorithm, chosen for
  /// kRowInvariantRows rows, without split-K reduction: each output row is
  /// then computed by the same instructions whatever the number of rows,
  /// so a row's bits do not depend on what shares its GEMM (a cache hit's
  /// tail gives the bits its row had inside the whole prompt; a decode row
  /// the same alone or batched). Slower for a few rows. A problem the
  /// algorithm cannot run (cublasLtMatmulAlgoCheck) fails rather than
  /// silently falling back to another algorithm.
  bool rowInvariant = false;
};

class GemmEngine {
public:
  static constexpr size_t kDefaultWorkspaceBytes =
      GemmOptions::kDefaultWorkspaceBytes;
  /// The rows the row-invariant algorithm is chosen for.
  static constexpr int64_t kRowInvariantRows = 256;

  /// Creates the cuBLASLt handle and the workspace on the current device.
  static Status create(std::unique_ptr<GemmEngine> &engine,
                       size_t workspaceBytes = kDefaultWorkspaceBytes);
  static Status create(std::unique_ptr<GemmEngine> &engine,
                       const GemmOptions &options);
  ~GemmEngine();
  GemmEngine(const GemmEngine &) = delete;
  GemmEngine &operator=(const GemmEngine &) = delete;

  /// Queues the product on `stream`. Fails on a malformed problem (zero or
  /// negative sizes, strides below the widths, null pointers) before any
  /// cuBLASLt call, or when no algorithm fits the workspace.
  Status multiply(const GemmProblem &problem, Stream stream);

  struct Impl;

private:
  explicit GemmEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Checks a problem's sizes, strides and pointers (what multiply() checks
/// first); host-only, no device needed.
Status checkGemmProblem(const GemmProblem &problem);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_GEMM_H
