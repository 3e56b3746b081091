//===- CudaDevice.cpp - Finds a GPU the CUDA backend can use --------------===//

#include "runtime/backend/CudaDevice.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda_runtime_api.h>

namespace spanc::backend {

namespace {

constexpr const char *kFallback = " (--device=cpu runs without a GPU)";

/// CUDA versions are 1000 * major + 10 * minor.
std::string versionText(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string((version % 1000) / 10);
}

llvm::Error probeError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "no usable CUDA device: " + message +
                                     kFallback);
}

} // namespace

std::string CudaDeviceInfo::describe() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << name << " (sm_" << computeMajor << computeMinor << ", "
     << llvm::format("%.0f", double(totalMemoryBytes) / (1 << 30))
     << " GiB, driver " << versionText(driverVersion) << ", runtime "
     << versionText(runtimeVersion) << ")";
  return os.str();
}

llvm::Expected<CudaDeviceInfo> explainCudaProbe(const CudaProbeFacts &facts) {
  using Count = CudaProbeFacts::CountResult;
  // A missing libcuda reads as driver version 0 whatever the count says.
  if (facts.driverVersion == 0 || facts.countResult == Count::NoDriver)
    return probeError("no NVIDIA driver found (libcuda.so.1 is not "
                      "installed or cannot be loaded)");
  // Minor versions are compatible within a major one (CUDA's minor
  // version compatibility); an older major is not.
  if (facts.countResult == Count::InsufficientDriver ||
      facts.driverVersion / 1000 < facts.runtimeVersion / 1000)
    return probeError(
        "the NVIDIA driver supports CUDA " + versionText(facts.driverVersion) +
        ", older than the CUDA " + versionText(facts.runtimeVersion) +
        " runtime spanc was built with; update the driver");
  if (facts.countResult == Count::NoDevice ||
      (facts.countResult == Count::Ok && facts.deviceCount == 0))
    return probeError("the driver (CUDA " + versionText(facts.driverVersion) +
                      ") sees no GPU");
  if (facts.countResult != Count::Ok)
    return probeError("the CUDA runtime failed to list devices: " +
                      facts.countErrorText);
  if (facts.ordinal < 0 || facts.ordinal >= facts.deviceCount)
    return probeError("device " + std::to_string(facts.ordinal) +
                      " does not exist (" + std::to_string(facts.deviceCount) +
                      " found)");
  if (facts.computeMajor < kMinComputeMajor ||
      (facts.computeMajor == kMinComputeMajor &&
       facts.computeMinor < kMinComputeMinor))
    return probeError(
        facts.name + " has compute capability " +
        std::to_string(facts.computeMajor) + "." +
        std::to_string(facts.computeMinor) + "; the CUDA backend needs " +
        std::to_string(kMinComputeMajor) + "." +
        std::to_string(kMinComputeMinor) + " or newer (bf16 arithmetic)");
  CudaDeviceInfo info;
  info.ordinal = facts.ordinal;
  info.name = facts.name;
  info.computeMajor = facts.computeMajor;
  info.computeMinor = facts.computeMinor;
  info.totalMemoryBytes = facts.totalMemoryBytes;
  info.driverVersion = facts.driverVersion;
  info.runtimeVersion = facts.runtimeVersion;
  return info;
}

llvm::Expected<CudaDeviceInfo> probeCudaDevice(int ordinal) {
  CudaProbeFacts facts;
  facts.ordinal = ordinal;
  // Neither call needs a driver: without one the driver version reads 0.
  if (cudaDriverGetVersion(&facts.driverVersion) != cudaSuccess)
    facts.driverVersion = 0;
  cudaRuntimeGetVersion(&facts.runtimeVersion);
  cudaError_t status = cudaGetDeviceCount(&facts.deviceCount);
  // The runtime keeps the error sticky for the next call; clear it.
  cudaGetLastError();
  switch (status) {
  case cudaSuccess:
    break;
  case cudaErrorNoDevice:
    facts.countResult = CudaProbeFacts::CountResult::NoDevice;
    break;
  case cudaErrorInsufficientDriver:
    facts.countResult = CudaProbeFacts::CountResult::InsufficientDriver;
    break;
  default:
    facts.countResult = CudaProbeFacts::CountResult::OtherError;
    facts.countErrorText = std::string(cudaGetErrorName(status)) + ": " +
                           cudaGetErrorString(status);
    break;
  }
  if (status == cudaSuccess && ordinal >= 0 && ordinal < facts.deviceCount) {
    cudaDeviceProp properties;
    cudaError_t propertiesStatus =
        cudaGetDeviceProperties(&properties, ordinal);
    if (propertiesStatus != cudaSuccess) {
      cudaGetLastError();
      facts.countResult = CudaProbeFacts::CountResult::OtherError;
      facts.countErrorText = std::string(cudaGetErrorName(propertiesStatus)) +
                             ": " + cudaGetErrorString(propertiesStatus);
    } else {
      facts.name = properties.name;
      facts.computeMajor = properties.major;
      facts.computeMinor = properties.minor;
      facts.totalMemoryBytes = properties.totalGlobalMem;
    }
  }
  return explainCudaProbe(facts);
}

} // namespace spanc::backend
