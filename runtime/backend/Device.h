//===- Device.h - Which device runs the forward pass (--device) -----------===//
//
// The one choice the tools hand the runtime about hardware: the CPU backend
// (the reference, always there) or the CUDA backend (needs a GPU of compute
// capability 8.0 or newer; runtime/backend/CudaDevice.h says why not when
// there is none). Kept apart from the backends so options structs and the
// command line name a device without linking any device code.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_DEVICE_H
#define SPANC_RUNTIME_BACKEND_DEVICE_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace spanc::backend {

enum class Device { Cpu, Cuda };

/// "cpu" or "cuda".
llvm::StringRef deviceName(Device device);
/// The inverse of deviceName; nullopt for anything else.
std::optional<Device> parseDevice(llvm::StringRef name);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_DEVICE_H
