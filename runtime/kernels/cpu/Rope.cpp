//===- Rope.cpp - Rotary position embedding on the CPU --------------------===//

#include "runtime/kernels/cpu/Rope.h"

#include <algorithm>
#include <cmath>

namespace spanc::cpu {

namespace {

/// The pair index at which the rotation for `position` completes
/// `numRotations` turns over the original context (YaRN's correction range).
double yarnCorrectionDim(int rotaryDim, int originalContext,
                         double numRotations, double theta) {
  return rotaryDim * std::log(originalContext / (numRotations * 2.0 * M_PI)) /
         (2.0 * std::log(theta));
}

} // namespace

void ropeAngles(const RopeConfig &config, double position, float *cosOut,
                float *sinOut) {
  const int half = config.rotaryDim / 2;
  const double frequencyScale = config.scaling == RopeScaling::None
                                    ? 1.0
                                    : 1.0 / std::max(1.0f, config.factor);
  double magnitude = config.attentionFactor;
  double low = 0, high = 0, extFactor = 0;
  if (config.scaling == RopeScaling::Yarn) {
    extFactor = config.yarnExtFactor;
    int context = config.originalContext > 0 ? config.originalContext : 4096;
    low = std::floor(yarnCorrectionDim(config.rotaryDim, context,
                                       config.yarnBetaFast, config.theta));
    high = std::ceil(yarnCorrectionDim(config.rotaryDim, context,
                                       config.yarnBetaSlow, config.theta));
    low = std::max(0.0, low);
    high = std::min(double(config.rotaryDim - 1), high);
    if (extFactor != 0)
      magnitude *= 1.0 + 0.1 * std::log(1.0 / frequencyScale);
  }
  for (int pair = 0; pair < half; ++pair) {
    double extrapolated = position * std::pow(double(config.theta),
                                              -2.0 * pair / config.rotaryDim);
    if (!config.freqFactors.empty())
      extrapolated /= config.freqFactors[size_t(pair)];
    double angle = extrapolated * frequencyScale;
    if (extFactor != 0) {
      double ramp = (pair - low) / std::max(0.001, high - low);
      double mix = (1.0 - std::clamp(ramp, 0.0, 1.0)) * extFactor;
      angle = angle * (1.0 - mix) + extrapolated * mix;
    }
    cosOut[pair] = float(std::cos(angle) * magnitude);
    sinOut[pair] = float(std::sin(angle) * magnitude);
  }
}

RopeTable::RopeTable(const RopeConfig &config, int64_t numPositions)
    : config_(config), numPositions_(numPositions),
      values_(size_t(numPositions) * size_t(config.rotaryDim)) {
  const int half = config.rotaryDim / 2;
#pragma omp parallel for schedule(static)
  for (int64_t position = 0; position < numPositions; ++position) {
    float *row = values_.data() + position * config.rotaryDim;
    ropeAngles(config, double(position), row, row + half);
  }
  pairMajor_.assign(size_t(config.rotaryDim * pairStride()), 0.0f);
#pragma omp parallel for schedule(static)
  for (int index = 0; index < config.rotaryDim; ++index) {
    float *out = pairMajor_.data() + int64_t(index) * pairStride();
    for (int64_t position = 0; position < numPositions; ++position)
      out[position] = values_[size_t(position * config.rotaryDim + index)];
  }
}

void rotateHead(RopeOrder order, int rotaryDim, const float *cosSin, float *x,
                int64_t stride) {
  const int half = rotaryDim / 2;
  const float *cosValues = cosSin;
  const float *sinValues = cosSin + half;
  if (order == RopeOrder::Normal) {
    for (int pair = 0; pair < half; ++pair) {
      float *first = x + (2 * pair) * stride;
      float *second = x + (2 * pair + 1) * stride;
      float a = *first, b = *second;
      *first = a * cosValues[pair] - b * sinValues[pair];
      *second = a * sinValues[pair] + b * cosValues[pair];
    }
    return;
  }
  for (int pair = 0; pair < half; ++pair) {
    float *first = x + pair * stride;
    float *second = x + (pair + half) * stride;
    float a = *first, b = *second;
    *first = a * cosValues[pair] - b * sinValues[pair];
    *second = a * sinValues[pair] + b * cosValues[pair];
  }
}

void applyRope(const RopeShape &shape, const RopeTable &table,
               const int32_t *positions, float *x) {
  const RopeConfig &config = table.config();
  const int64_t headDim = config.headDim;
#pragma omp parallel for schedule(static) if (shape.rows > 1)
  for (int64_t row = 0; row < shape.rows; ++row) {
    const float *cosSin = table.row(positions[row]);
    float *rowData = x + row * shape.rowStride;
    for (int64_t head = 0; head < shape.numHeads; ++head)
      rotateHead(config.order, config.rotaryDim, cosSin,
                 rowData + head * headDim, 1);
  }
}

} // namespace spanc::cpu
