//===- Rope.cpp - Rotary position embedding on the CPU --------------------===//

#include "runtime/kernels/cpu/Rope.h"
#include "runtime/kernels/cpu/RowLoop.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/VectorMath.h"

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

namespace {

/// The most rotating dims the vector path takes (its cos/sin live in
/// registers and on the stack).
constexpr int kMaxVectorRotaryDim = 256;

/// a * b rounded on its own: GCC treats the plain intrinsics as vector
/// arithmetic and would fuse a product and a sum into an FMA, which
/// rotateHead (baseline x86-64, no FMA) never does. An explicit rounding
/// (the default round-to-nearest) keeps the product a VMULPS.
SPANC_AVX512 inline __m512 roundedProduct(__m512 a, __m512 b) {
  return _mm512_mul_round_ps(a, b,
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/// rotateHead over every head of one row, 16 lanes at a time, with
/// rotateHead's arithmetic (a c - b s as a c + b (-s), a s + b c as
/// b c + a s: the same roundings, so the same bits). Normal order: a
/// vector holds 8 pairs, each lane times its pair's cos plus its partner
/// (swapped within the pair) times its pair's sin, negated on the first
/// lane; NeoX: the halves' vectors at dims d and d + half.
SPANC_AVX512 void rotateRowAvx512(const RopeConfig &config, const float *cosSin,
                                  int64_t numHeads, float *row) {
  const int rotaryDim = config.rotaryDim;
  const int half = rotaryDim / 2;
  const int64_t headDim = config.headDim;
  const float *cosValues = cosSin;
  const float *sinValues = cosSin + half;
  if (config.order == RopeOrder::Normal) {
    __m512 cosines[kMaxVectorRotaryDim / 16], sines[kMaxVectorRotaryDim / 16];
    // Lanes 2i and 2i + 1 take pair i's value; even lanes' sin negated.
    const __m512i duplicate =
        _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i evenSigns =
        _mm512_set_epi32(0, int32_t(0x80000000u), 0, int32_t(0x80000000u), 0,
                         int32_t(0x80000000u), 0, int32_t(0x80000000u), 0,
                         int32_t(0x80000000u), 0, int32_t(0x80000000u), 0,
                         int32_t(0x80000000u), 0, int32_t(0x80000000u));
    for (int chunk = 0; chunk < rotaryDim / 16; ++chunk) {
      cosines[chunk] = _mm512_permutexvar_ps(
          duplicate,
          _mm512_castps256_ps512(_mm256_loadu_ps(cosValues + 8 * chunk)));
      sines[chunk] = _mm512_castsi512_ps(_mm512_xor_si512(
          _mm512_castps_si512(_mm512_permutexvar_ps(
              duplicate,
              _mm512_castps256_ps512(_mm256_loadu_ps(sinValues + 8 * chunk)))),
          evenSigns));
    }
    for (int64_t head = 0; head < numHeads; ++head) {
      float *x = row + head * headDim;
      for (int chunk = 0; chunk < rotaryDim / 16; ++chunk) {
        const __m512 values = _mm512_loadu_ps(x + 16 * chunk);
        const __m512 partners = _mm512_permute_ps(values, 0xb1);
        _mm512_storeu_ps(x + 16 * chunk,
                         _mm512_add_ps(roundedProduct(values, cosines[chunk]),
                                       roundedProduct(partners, sines[chunk])));
      }
    }
    return;
  }
  for (int64_t head = 0; head < numHeads; ++head) {
    float *x = row + head * headDim;
    for (int pair = 0; pair < half; pair += 16) {
      const __m512 cosine = _mm512_loadu_ps(cosValues + pair);
      const __m512 sine = _mm512_loadu_ps(sinValues + pair);
      const __m512 first = _mm512_loadu_ps(x + pair);
      const __m512 second = _mm512_loadu_ps(x + half + pair);
      _mm512_storeu_ps(x + pair, _mm512_sub_ps(roundedProduct(first, cosine),
                                               roundedProduct(second, sine)));
      _mm512_storeu_ps(x + half + pair,
                       _mm512_add_ps(roundedProduct(first, sine),
                                     roundedProduct(second, cosine)));
    }
  }
}

} // namespace

void applyRope(const RopeShape &shape, const RopeTable &table,
               const int32_t *positions, float *x) {
  const RopeConfig &config = table.config();
  const int64_t headDim = config.headDim;
  const int vectorMultiple = config.order == RopeOrder::Normal ? 16 : 32;
  if (cpuFeatures().hasAvx512() && config.rotaryDim % vectorMultiple == 0 &&
      config.rotaryDim <= kMaxVectorRotaryDim) {
    forEachRow(shape.rows, true, [&](int64_t row) {
      rotateRowAvx512(config, table.row(positions[row]), shape.numHeads,
                      x + row * shape.rowStride);
    });
    return;
  }
  forEachRow(shape.rows, true, [&](int64_t row) {
    const float *cosSin = table.row(positions[row]);
    float *rowData = x + row * shape.rowStride;
    for (int64_t head = 0; head < shape.numHeads; ++head)
      rotateHead(config.order, config.rotaryDim, cosSin,
                 rowData + head * headDim, 1);
  });
}

} // namespace spanc::cpu
