//===- PagedAttention.h - Paged causal attention on CUDA devices ----------===//
//
// cpu::pagedAttention on the GPU, for prefill and decode alike: every
// sequence is a page list over the K/V pool (Types.h: PagedKvView, the
// layout of backend::KvStorage), its queries are the last logical tokens of
// that list, padding slots take no logical index, heads are grouped (GQA).
// Two variants, as on the CPU: K stored rotated (ReRoPE relocation moves
// it), or stored unrotated and rotated inside the kernel at its logical
// index (rope-in-kernel: `keyRope` set). Two kernels: on tensor cores
// (queries, keys and softmax weights rounded to f16, f32 accumulation and
// softmax; the default where it fits) and SIMT (every product in f32).
// Span scaling (cpu::SpanScaling) is not implemented: the backend refuses
// a batch that asks for it.
//
// A step lays its batch out once (AttentionWorkspace::prepare: the plan of
// AttentionPlan.h and the page lists copied to the device in one copy);
// each layer then runs pagedAttention over that workspace: one launch, plus
// one merge launch when a tile's pages were split.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTION_H
#define SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTION_H

#include "runtime/kernels/cuda/AttentionPlan.h"
#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>
#include <vector>

namespace spanc::cuda {

/// One step's attention layout on the device; grows to the largest batch
/// seen and never shrinks.
class AttentionWorkspace {
public:
  /// Plans `batch` (host arrays) and copies the plan and the page lists to
  /// the device on `stream`. Fails, changing nothing on the device, when
  /// buildAttentionPlan does.
  Status prepare(const PagedAttentionShape &shape,
                 const PagedAttentionBatch &batch, int blockSize,
                 const AttentionPlanOptions &options, Stream stream);

  const AttentionPlan &plan() const { return plan_; }
  int blockSize() const { return blockSize_; }

  /// Device arrays (valid after prepare).
  struct DeviceArrays {
    const int32_t *queryOffsets = nullptr;
    const int32_t *pageOffsets = nullptr;
    const int32_t *blockIds = nullptr;
    const int32_t *validTokens = nullptr;
    const int32_t *pageStarts = nullptr;
    const AttentionWorkItem *items = nullptr;
    const AttentionMergeGroup *merges = nullptr;
    float *partials = nullptr;
  };
  const DeviceArrays &device() const { return device_; }

private:
  AttentionPlan plan_;
  PagedAttentionShape shape_;
  int blockSize_ = 0;
  PackedAttentionPlan packed_;
  DeviceBuffer indices_;
  DeviceBuffer partials_;
  DeviceArrays device_;
};

/// Which kernel runs a launch.
enum class AttentionKernel {
  /// Tensor cores (f16 products, f32 accumulation) where the configuration
  /// fits them (f16 K/V in 16-slot blocks, head dim a multiple of 16 up to
  /// 128), else the SIMT kernel.
  Auto,
  /// The SIMT kernel, every product in f32 (the reference).
  Simt,
};

struct PagedAttentionOptions {
  /// When set (device table covering the longest page list), K is stored
  /// unrotated and each key is rotated at its logical index in the kernel.
  const RopeTableView *keyRope = nullptr;
  AttentionKernel kernel = AttentionKernel::Auto;
};

/// output[row][head * headDim + d] = softmax(q k^T * scale) v, causal over
/// logical indices, for every sequence the workspace was prepared with.
/// `queries` rows are shape.queryRowStride floats apart (device memory).
Status pagedAttention(const PagedAttentionShape &shape,
                      const AttentionWorkspace &workspace,
                      const PagedKvView &kv, const float *queries,
                      float *output, const PagedAttentionOptions &options,
                      Stream stream);
/// The same, rounding the output to bf16 (the output projection's input).
Status pagedAttention(const PagedAttentionShape &shape,
                      const AttentionWorkspace &workspace,
                      const PagedKvView &kv, const float *queries,
                      uint16_t *output, const PagedAttentionOptions &options,
                      Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_PAGEDATTENTION_H
