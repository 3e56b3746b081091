//===- Sampling.h - Greedy tokens and logits off the device ---------------===//
//
// Greedy decoding picks the argmax of each logits row on the GPU and
// copies back one int per row instead of a vocabulary of floats; other
// sampling (temperature, top-k, top-p) copies the rows to the host, where
// model::Sampler draws as on the CPU. Ties go to the lowest id, as in
// Sampler::argmax (the first maximum wins); NaN is never chosen over a
// number.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_SAMPLING_H
#define SPANC_RUNTIME_KERNELS_CUDA_SAMPLING_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"

#include <cstdint>

namespace spanc::cuda {

/// tokens[r] = argmax_c logits[r * rowStride + c] over c < vocab, for
/// r < rows; all device memory. One block of threads per row.
Status argmaxRows(const float *logits, int64_t rows, int64_t vocab,
                  int64_t rowStride, int32_t *tokens, Stream stream);

/// argmaxRows into `scratch` (grown as needed), then copied to
/// `hostTokens` (rows ints); waits for the stream.
Status greedyTokens(const float *logits, int64_t rows, int64_t vocab,
                    int64_t rowStride, DeviceBuffer &scratch,
                    int32_t *hostTokens, Stream stream);

/// Copies `rows` logits rows (vocab floats each, rowStride apart on the
/// device) to `hostLogits` packed (vocab apart); waits for the stream.
Status copyLogitsToHost(const float *logits, int64_t rows, int64_t vocab,
                        int64_t rowStride, float *hostLogits, Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_SAMPLING_H
