//===- CudaDevice.h - Finds a GPU the CUDA backend can use ----------------===//
//
// `--device=cuda` must fail at start with a message a user can act on when
// there is no usable GPU, never crash: no driver (libcuda missing or too old
// for the runtime spanc was built with), no device, or a device older than
// compute capability 8.0 (the backend computes in bf16, which sm_80 brings).
// The probe asks the CUDA runtime, which loads the driver lazily, so a
// binary linked with it starts on machines without one. What the runtime
// answered is judged by a plain function (explainCudaProbe), so every
// message is tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_CUDADEVICE_H
#define SPANC_RUNTIME_BACKEND_CUDADEVICE_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace spanc::backend {

/// The oldest compute capability the CUDA backend runs on (bf16 tensor
/// cores and bf16 arithmetic: sm_80).
constexpr int kMinComputeMajor = 8;
constexpr int kMinComputeMinor = 0;

/// What the CUDA runtime said, as plain values.
struct CudaProbeFacts {
  /// cudaDriverGetVersion: 0 when no driver is installed.
  int driverVersion = 0;
  /// cudaRuntimeGetVersion: the runtime spanc was linked with.
  int runtimeVersion = 0;
  /// How cudaGetDeviceCount ended.
  enum class CountResult {
    Ok,
    NoDevice,           ///< cudaErrorNoDevice
    InsufficientDriver, ///< cudaErrorInsufficientDriver
    NoDriver,           ///< libcuda could not be loaded
    OtherError,
  } countResult = CountResult::Ok;
  /// The runtime's text for any other error.
  std::string countErrorText;
  int deviceCount = 0;
  /// Device `ordinal`'s name and compute capability (when it exists).
  int ordinal = 0;
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  uint64_t totalMemoryBytes = 0;
};

/// A device the backend can use.
struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  uint64_t totalMemoryBytes = 0;
  int driverVersion = 0, runtimeVersion = 0;
  /// "NVIDIA H200 (sm_90, 140 GiB, driver 13.0, runtime 13.0)".
  std::string describe() const;
};

/// The device described by `facts`, or an error saying why it cannot be
/// used and what to do ("--device=cpu runs without a GPU").
llvm::Expected<CudaDeviceInfo> explainCudaProbe(const CudaProbeFacts &facts);

/// Asks the CUDA runtime about device `ordinal` and judges the answer.
llvm::Expected<CudaDeviceInfo> probeCudaDevice(int ordinal = 0);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CUDADEVICE_H
