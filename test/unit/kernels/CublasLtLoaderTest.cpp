//===- CublasLtLoaderTest.cpp - cuBLASLt loaded at first use --------------===//

#include "runtime/kernels/cuda/CublasLt.cuh"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

using namespace spanc::cuda;

namespace {

/// Whether a library whose path contains `name` is mapped into this process.
bool isMapped(const std::string &name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos)
      return true;
  return false;
}

TEST(CublasLtLoader, NothingIsMappedBeforeTheFirstLoad) {
  // This binary links the CUDA kernels (and the GEMM that calls cuBLASLt).
  EXPECT_EQ(cublasLtIfLoaded(), nullptr);
  EXPECT_FALSE(isMapped("libcublasLt"));
}

TEST(CublasLtLoader, EveryEntryPointResolvesOnce) {
  Status status = loadCublasLt();
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(isMapped("libcublasLt"));
  const CublasLtApi &api = cublasLt();
  EXPECT_EQ(cublasLtIfLoaded(), &api);
  const void *entries[] = {
      reinterpret_cast<const void *>(api.cublasLtCreate),
      reinterpret_cast<const void *>(api.cublasLtDestroy),
      reinterpret_cast<const void *>(api.cublasLtGetStatusName),
      reinterpret_cast<const void *>(api.cublasLtGetStatusString),
      reinterpret_cast<const void *>(api.cublasLtMatmul),
      reinterpret_cast<const void *>(api.cublasLtMatmulAlgoCheck),
      reinterpret_cast<const void *>(api.cublasLtMatmulAlgoConfigSetAttribute),
      reinterpret_cast<const void *>(api.cublasLtMatmulAlgoGetHeuristic),
      reinterpret_cast<const void *>(api.cublasLtMatmulDescCreate),
      reinterpret_cast<const void *>(api.cublasLtMatmulDescDestroy),
      reinterpret_cast<const void *>(api.cublasLtMatmulDescSetAttribute),
      reinterpret_cast<const void *>(api.cublasLtMatmulPreferenceCreate),
      reinterpret_cast<const void *>(api.cublasLtMatmulPreferenceDestroy),
      reinterpret_cast<const void *>(api.cublasLtMatmulPreferenceSetAttribute),
      reinterpret_cast<const void *>(api.cublasLtMatrixLayoutCreate),
      reinterpret_cast<const void *>(api.cublasLtMatrixLayoutDestroy)};
  for (const void *entry : entries)
    EXPECT_NE(entry, nullptr);
  // The library's own status names come through (no device needed).
  EXPECT_STREQ(api.cublasLtGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED),
               "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_TRUE(loadCublasLt().ok());
}

} // namespace
