//===- RmsNormCudaTest.cpp - CUDA RMSNorm against a CPU reference ---------===//

#include "runtime/kernels/cuda/RmsNorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

void rmsNormReference(const std::vector<float> &x,
                      const std::vector<float> &weight, std::vector<float> &y,
                      size_t rows, size_t cols, float epsilon) {
  for (size_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (size_t c = 0; c < cols; ++c)
      sum += double(x[r * cols + c]) * x[r * cols + c];
    float scale = 1.0f / std::sqrt(float(sum / cols) + epsilon);
    for (size_t c = 0; c < cols; ++c)
      y[r * cols + c] = x[r * cols + c] * scale * weight[c];
  }
}

TEST(RmsNormCuda, MatchesCpuReferenceOnTheSmolLM2Width) {
  if (spanc::cuda::deviceCount() == 0)
    GTEST_SKIP() << "no CUDA device on this machine";
  const size_t rows = 7, cols = 576;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * cols), weight(cols), expected(rows * cols),
      actual(rows * cols);
  for (float &v : x)
    v = normal(rng);
  for (float &v : weight)
    v = normal(rng);
  rmsNormReference(x, weight, expected, rows, cols, 1e-5f);
  ASSERT_EQ(spanc::cuda::rmsNormOnDevice(x.data(), weight.data(), actual.data(),
                                         rows, cols, 1e-5f),
            "");
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 1e-4f) << "at " << i;
}

} // namespace
