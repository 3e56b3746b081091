//===- Rows.h - Row gathers and conversions on CUDA devices ---------------===//
//
// Moving rows between the forward pass's buffers: the tokens whose logits
// were asked for gathered before the output head, and f32 rows rounded to
// bf16 for a GEMM (the attention output, when it is written in f32).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ROWS_H
#define SPANC_RUNTIME_KERNELS_CUDA_ROWS_H

#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Status.h"
#include "runtime/kernels/cuda/Types.h"

#include <cstdint>

namespace spanc::cuda {

/// out[r][c] = x[rowIndices[r]][c] for r < shape.rows (device indices).
Status gatherRows(const RowShape &shape, const float *x,
                  const int32_t *rowIndices, float *out, Stream stream);

/// out[r][c] = bf16(x[r][c]) (round to nearest even).
Status convertToBf16(const RowShape &shape, const float *x, uint16_t *out,
                     Stream stream);

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ROWS_H
