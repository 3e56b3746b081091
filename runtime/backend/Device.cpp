//===- Device.cpp - Which device runs the forward pass (--device) ---------===//

#include "runtime/backend/Device.h"

namespace spanc::backend {

llvm::StringRef deviceName(Device device) {
  return device == Device::Cuda ? "cuda" : "cpu";
}

std::optional<Device> parseDevice(llvm::StringRef name) {
  if (name == "cpu")
    return Device::Cpu;
  if (name == "cuda")
    return Device::Cuda;
  return std::nullopt;
}

} // namespace spanc::backend
