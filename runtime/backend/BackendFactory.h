//===- BackendFactory.h - Makes the Backend a device option names ---------===//
//
// The one place that knows every backend: the executor (runtime/sched) and
// the tools ask it for a Backend by Device, so neither names CpuBackend or
// CudaBackend, and the CUDA backend's errors (no GPU, an unsupported mode)
// reach the user through llvm::Error before any step runs.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_BACKENDFACTORY_H
#define SPANC_RUNTIME_BACKEND_BACKENDFACTORY_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/Device.h"
#include "runtime/model/Model.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>

namespace spanc::backend {

struct BackendOptions {
  Device device = Device::Cpu;
  /// The K/V pool: numBlocks blocks of blockSize tokens.
  int64_t numBlocks = 0;
  unsigned blockSize = 16;
  /// K stored rotated (ReRoPE) or not (rope-in-kernel).
  bool keysRotated = false;
  /// CPU: fault the K/V pool in at creation (KvStorageConfig::prefault).
  /// CUDA allocates device memory up front either way.
  bool prefaultKv = false;
  /// CUDA: which GPU.
  int deviceOrdinal = 0;
};

/// The backend `options.device` names, over `model` (which must outlive
/// it). CUDA: fails when no usable GPU is found (CudaDevice.h) or the
/// model's options ask for what the CUDA backend does not do.
llvm::Expected<std::unique_ptr<Backend>>
createBackend(model::Model &model, const BackendOptions &options);

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_BACKENDFACTORY_H
