//===- CudaDeviceTest.cpp - Why --device=cuda cannot run, in words --------===//
//
// explainCudaProbe judges what the CUDA runtime said; every failure a user
// can meet is checked here on plain values, and the real probe runs too: it
// must answer (a device, or an error) without crashing on a machine with
// no driver.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/CudaDevice.h"
#include "runtime/backend/Device.h"

#include <gtest/gtest.h>

namespace {

using spanc::backend::CudaProbeFacts;
using spanc::backend::explainCudaProbe;
using Count = CudaProbeFacts::CountResult;

CudaProbeFacts h200() {
  CudaProbeFacts facts;
  facts.driverVersion = 13000;
  facts.runtimeVersion = 13000;
  facts.deviceCount = 1;
  facts.name = "NVIDIA H200";
  facts.computeMajor = 9;
  facts.computeMinor = 0;
  facts.totalMemoryBytes = uint64_t(140) << 30;
  return facts;
}

std::string failure(const CudaProbeFacts &facts) {
  auto info = explainCudaProbe(facts);
  if (info)
    return "";
  return llvm::toString(info.takeError());
}

TEST(CudaDevice, AHopperDeviceIsUsable) {
  auto info = explainCudaProbe(h200());
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->describe(),
            "NVIDIA H200 (sm_90, 140 GiB, driver 13.0, runtime 13.0)");
}

TEST(CudaDevice, NoDriverSaysSoAndPointsToTheCpu) {
  CudaProbeFacts facts = h200();
  facts.driverVersion = 0;
  facts.countResult = Count::InsufficientDriver;
  facts.deviceCount = 0;
  EXPECT_EQ(failure(facts),
            "no usable CUDA device: no NVIDIA driver found (libcuda.so.1 is "
            "not installed or cannot be loaded) (--device=cpu runs without a "
            "GPU)");
}

TEST(CudaDevice, AnOldDriverNamesBothVersions) {
  CudaProbeFacts facts = h200();
  facts.driverVersion = 12040;
  facts.countResult = Count::InsufficientDriver;
  EXPECT_NE(failure(facts).find("the NVIDIA driver supports CUDA 12.4, older "
                                "than the CUDA 13.0 runtime"),
            std::string::npos);
  // A newer minor runtime on an older minor driver is compatible.
  facts = h200();
  facts.runtimeVersion = 13010;
  EXPECT_EQ(failure(facts), "");
}

TEST(CudaDevice, NoDeviceIsReported) {
  CudaProbeFacts facts = h200();
  facts.countResult = Count::NoDevice;
  facts.deviceCount = 0;
  EXPECT_NE(failure(facts).find("sees no GPU"), std::string::npos);
  facts.countResult = Count::Ok;
  EXPECT_NE(failure(facts).find("sees no GPU"), std::string::npos);
}

TEST(CudaDevice, ComputeCapabilityBelow80IsRefused) {
  CudaProbeFacts facts = h200();
  facts.name = "Tesla V100";
  facts.computeMajor = 7;
  EXPECT_EQ(failure(facts),
            "no usable CUDA device: Tesla V100 has compute capability 7.0; "
            "the CUDA backend needs 8.0 or newer (bf16 arithmetic) "
            "(--device=cpu runs without a GPU)");
  facts.computeMajor = 8;
  EXPECT_EQ(failure(facts), "");
}

TEST(CudaDevice, AMissingOrdinalAndOtherErrorsAreReported) {
  CudaProbeFacts facts = h200();
  facts.ordinal = 3;
  EXPECT_NE(failure(facts).find("device 3 does not exist (1 found)"),
            std::string::npos);
  facts = h200();
  facts.countResult = Count::OtherError;
  facts.countErrorText = "cudaErrorUnknown: unknown error";
  EXPECT_NE(failure(facts).find("cudaErrorUnknown"), std::string::npos);
}

TEST(Device, CpuAndCudaAreTheNamesTheFlagTakes) {
  using spanc::backend::Device;
  EXPECT_EQ(spanc::backend::parseDevice("cpu"), Device::Cpu);
  EXPECT_EQ(spanc::backend::parseDevice("cuda"), Device::Cuda);
  EXPECT_FALSE(spanc::backend::parseDevice("gpu").has_value());
  EXPECT_EQ(spanc::backend::deviceName(Device::Cuda), "cuda");
  EXPECT_EQ(spanc::backend::deviceName(Device::Cpu), "cpu");
}

TEST(CudaDevice, TheRealProbeAnswersWithoutCrashing) {
  auto info = spanc::backend::probeCudaDevice();
  if (!info) {
    std::string message = llvm::toString(info.takeError());
    EXPECT_NE(message.find("no usable CUDA device: "), std::string::npos);
    GTEST_SKIP() << "no CUDA device: " << message;
  }
  EXPECT_GE(info->computeMajor, 8);
}

} // namespace
