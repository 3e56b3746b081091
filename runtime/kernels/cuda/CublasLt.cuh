//===- CublasLt.cuh - cuBLASLt's entry points, loaded on first use --------===//
//
// Internal to the .cu files. Linking libcublasLt made every process load it
// at start-up, a CPU-only `spanc serve` too, and its start-up code left
// ~61 MiB of the library resident (docs/ARCHITECTURE.md, "Memory"). The
// GEMM engine resolves the few entry points it calls from the library when
// it is first created instead; a process that never makes one never loads
// it. Members are named as the functions they point to.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_CUBLASLT_CUH
#define SPANC_RUNTIME_KERNELS_CUDA_CUBLASLT_CUH

#include "runtime/kernels/cuda/Status.h"

#include <cublasLt.h>

namespace spanc::cuda {

struct CublasLtApi {
  decltype(&::cublasLtCreate) cublasLtCreate = nullptr;
  decltype(&::cublasLtDestroy) cublasLtDestroy = nullptr;
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString = nullptr;
  decltype(&::cublasLtMatmul) cublasLtMatmul = nullptr;
  decltype(&::cublasLtMatmulAlgoCheck) cublasLtMatmulAlgoCheck = nullptr;
  decltype(&::cublasLtMatmulAlgoConfigSetAttribute)
      cublasLtMatmulAlgoConfigSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic =
      nullptr;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute =
      nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate =
      nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy =
      nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute)
      cublasLtMatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy =
      nullptr;
};

/// Loads libcublasLt.so.<CUBLAS_VER_MAJOR> (the dynamic loader's search:
/// the binary's run path, LD_LIBRARY_PATH) and resolves every member, once
/// per process; later calls return the same outcome. A failure names the
/// library or the missing symbol and dlerror's text.
Status loadCublasLt();

/// The loaded entry points; only after loadCublasLt() succeeded.
const CublasLtApi &cublasLt();

/// The API when loaded, else null (error text without the library's names).
const CublasLtApi *cublasLtIfLoaded();

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_CUBLASLT_CUH
