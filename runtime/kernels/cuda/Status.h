//===- Status.h - The outcome of a CUDA, cuBLASLt or launch call ----------===//
//
// The kernels are compiled by nvcc, which does not see LLVM's headers, so
// their entry points return this small value instead of llvm::Error; the
// backend turns it into one with cuda::toError (StatusError.h). A failure
// names the call that failed and the library's error name and text, e.g.
// "cudaMalloc(1073741824 bytes): cudaErrorMemoryAllocation: out of memory".
// Nothing here aborts: a missing driver or device is an ordinary failure.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_STATUS_H
#define SPANC_RUNTIME_KERNELS_CUDA_STATUS_H

#include <string>
#include <utility>

namespace spanc::cuda {

class [[nodiscard]] Status {
public:
  /// Success.
  Status() = default;
  static Status success() { return Status(); }
  /// A failure with `message` (must not be empty).
  static Status failure(std::string message) {
    Status status;
    status.message_ =
        message.empty() ? "unknown CUDA failure" : std::move(message);
    return status;
  }

  bool ok() const { return message_.empty(); }
  /// The failure's text; empty on success.
  const std::string &message() const { return message_; }

private:
  std::string message_;
};

} // namespace spanc::cuda

/// Returns from the enclosing function when `expression` (a Status) failed.
#define SPANC_CUDA_TRY(expression)                                             \
  do {                                                                         \
    ::spanc::cuda::Status spancCudaStatus_ = (expression);                     \
    if (!spancCudaStatus_.ok())                                                \
      return spancCudaStatus_;                                                 \
  } while (false)

#endif // SPANC_RUNTIME_KERNELS_CUDA_STATUS_H
