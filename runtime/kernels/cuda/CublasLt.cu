//===- CublasLt.cu - cuBLASLt's entry points, loaded on first use ---------===//

#include "runtime/kernels/cuda/CublasLt.cuh"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace spanc::cuda {

namespace {

CublasLtApi api;
bool loaded = false;
std::string loadError;

template <typename Function>
bool resolve(void *library, const char *name, Function &slot) {
  slot = reinterpret_cast<Function>(dlsym(library, name));
  if (slot)
    return true;
  const char *why = dlerror();
  loadError = std::string("cuBLASLt: symbol ") + name + " not found" +
              (why ? std::string(": ") + why : std::string());
  return false;
}

void load() {
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void *library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    loadError = "cannot load " + name + " (cuBLASLt, for the CUDA GEMMs)" +
                (why ? std::string(": ") + why : std::string()) +
                "; set LD_LIBRARY_PATH to the CUDA " +
                std::to_string(CUBLAS_VER_MAJOR) + " libraries";
    return;
  }
  // The library stays loaded for the process's life (cuBLASLt handles may
  // outlive any one engine), so the handle is never closed.
#define SPANC_RESOLVE(function)                                                \
  if (!resolve(library, #function, api.function))                              \
    return;
  SPANC_RESOLVE(cublasLtCreate)
  SPANC_RESOLVE(cublasLtDestroy)
  SPANC_RESOLVE(cublasLtGetStatusName)
  SPANC_RESOLVE(cublasLtGetStatusString)
  SPANC_RESOLVE(cublasLtMatmul)
  SPANC_RESOLVE(cublasLtMatmulAlgoCheck)
  SPANC_RESOLVE(cublasLtMatmulAlgoConfigSetAttribute)
  SPANC_RESOLVE(cublasLtMatmulAlgoGetHeuristic)
  SPANC_RESOLVE(cublasLtMatmulDescCreate)
  SPANC_RESOLVE(cublasLtMatmulDescDestroy)
  SPANC_RESOLVE(cublasLtMatmulDescSetAttribute)
  SPANC_RESOLVE(cublasLtMatmulPreferenceCreate)
  SPANC_RESOLVE(cublasLtMatmulPreferenceDestroy)
  SPANC_RESOLVE(cublasLtMatmulPreferenceSetAttribute)
  SPANC_RESOLVE(cublasLtMatrixLayoutCreate)
  SPANC_RESOLVE(cublasLtMatrixLayoutDestroy)
#undef SPANC_RESOLVE
  loaded = true;
}

std::once_flag loadOnce;

} // namespace

Status loadCublasLt() {
  std::call_once(loadOnce, load);
  return loaded ? Status::success() : Status::failure(loadError);
}

const CublasLtApi &cublasLt() { return api; }

const CublasLtApi *cublasLtIfLoaded() {
  // Set once under call_once; read only after a load attempt finished.
  return loaded ? &api : nullptr;
}

} // namespace spanc::cuda
