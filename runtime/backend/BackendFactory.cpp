//===- BackendFactory.cpp - Makes the Backend a device option names -------===//

#include "runtime/backend/BackendFactory.h"

#include "runtime/backend/CpuBackend.h"
#include "runtime/backend/CudaBackend.h"

namespace spanc::backend {

llvm::Expected<std::unique_ptr<Backend>>
createBackend(model::Model &model, const BackendOptions &options) {
  if (options.device == Device::Cuda) {
    auto cuda = CudaBackend::create(model, options.numBlocks, options.blockSize,
                                    options.keysRotated, options.deviceOrdinal);
    if (!cuda)
      return cuda.takeError();
    return std::unique_ptr<Backend>(std::move(*cuda));
  }
  auto cpu = CpuBackend::create(model, options.numBlocks, options.blockSize,
                                options.keysRotated, options.prefaultKv);
  if (!cpu)
    return cpu.takeError();
  return std::unique_ptr<Backend>(std::move(*cpu));
}

} // namespace spanc::backend
