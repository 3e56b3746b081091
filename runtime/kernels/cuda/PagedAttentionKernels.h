//===- PagedAttentionKernels.h - The attention kernels' shared launch ----===//
//
// Internal to PagedAttention.cu and PagedAttentionMma.cu: what one
// attention launch reads (the same for both kernels), and the tensor-core
// kernel's entry points. Plain C++ (no CUDA types), as every header here.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTIONKERNELS_H
#define SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTIONKERNELS_H

#include "runtime/kernels/cuda/AttentionPlan.h"
#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/PagedAttention.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda::detail {

struct AttentionParams {
  PagedAttentionShape shape;
  PagedKvView kv;
  AttentionWorkspace::DeviceArrays arrays;
  RopeTableView keyRope; ///< cosSin null: K is stored rotated
  const float *queries;
  int tileRows;
};

/// Whether the tensor-core kernel runs this launch: f16 K/V in blocks of
/// 16, a head dim that is a multiple of 16 up to 128, 64-row tiles.
bool tensorCoreAttentionFits(const PagedAttentionShape &shape,
                             const PagedKvView &kv, int tileRows);

/// The tensor-core kernel over every work item (split items write their
/// range state, as the SIMT kernel's do; the caller runs the merge).
Status launchTensorCoreAttention(const AttentionParams &params,
                                 int64_t numItems, float *output,
                                 Stream stream);
Status launchTensorCoreAttention(const AttentionParams &params,
                                 int64_t numItems, uint16_t *output,
                                 Stream stream);

} // namespace spanc::cuda::detail

#endif // SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTIONKERNELS_H
