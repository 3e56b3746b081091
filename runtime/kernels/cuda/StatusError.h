//===- StatusError.h - cuda::Status as llvm::Error ------------------------===//
//
// Plain C++ (compiled by the host compiler, with LLVM): the bridge from the
// kernels' Status to the llvm::Error the rest of the runtime passes around.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_STATUSERROR_H
#define SPANC_RUNTIME_KERNELS_CUDA_STATUSERROR_H

#include "runtime/kernels/cuda/Status.h"

#include "llvm/Support/Error.h"

namespace spanc::cuda {

/// llvm::Error::success() for a success, else a StringError with the
/// status's message.
inline llvm::Error toError(const Status &status) {
  if (status.ok())
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 status.message());
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_STATUSERROR_H
