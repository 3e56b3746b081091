//===- ElementwiseMath.h - Per-element math of the row-wise kernels -------===//
//
// The arithmetic of RMSNorm, SwiGLU and RoPE for one element or pair, as
// SPANC_HOST_DEVICE functions: the kernels call them, and host tests check
// them against cpu::rmsNorm, cpu::swiGlu and cpu::rotateHead.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_ELEMENTWISEMATH_H
#define SPANC_RUNTIME_KERNELS_CUDA_ELEMENTWISEMATH_H

#include "runtime/kernels/cuda/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace spanc::cuda {

/// The RMSNorm factor of a row whose squares sum to `sumOfSquares`.
SPANC_HOST_DEVICE float rmsNormScale(float sumOfSquares, int64_t cols,
                                     float epsilon) {
  return 1.0f / sqrtf(sumOfSquares / float(cols) + epsilon);
}

/// One RMSNorm output, in the CPU's order: (x * scale) * weight.
SPANC_HOST_DEVICE float rmsNormElement(float x, float scale, float weight) {
  return x * scale * weight;
}

/// silu(gate) * up, silu(g) = g / (1 + e^-g).
SPANC_HOST_DEVICE float swiGluElement(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

/// The two dimensions of rotating pair `pair` (Normal: 2p, 2p+1; NeoX: p,
/// p + rotaryDim/2).
SPANC_HOST_DEVICE void ropePairDims(bool neox, int rotaryDim, int pair,
                                    int &first, int &second) {
  if (neox) {
    first = pair;
    second = pair + rotaryDim / 2;
  } else {
    first = 2 * pair;
    second = 2 * pair + 1;
  }
}

/// Turns (a, b) by the angle whose cos and sin are c and s, as
/// cpu::rotateHead does: (a c - b s, a s + b c).
SPANC_HOST_DEVICE void rotatePair(float a, float b, float c, float s,
                                  float &first, float &second) {
  first = a * c - b * s;
  second = a * s + b * c;
}

/// Whether candidate (value, index) beats the current best of an argmax:
/// a larger value, or an equal one at a lower index (Sampler::argmax keeps
/// the first maximum); NaN never beats a number.
SPANC_HOST_DEVICE bool argmaxBetter(float value, int64_t index, float best,
                                    int64_t bestIndex) {
  if (value != value)
    return false;
  if (best != best)
    return true;
  return value > best || (value == best && index < bestIndex);
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_ELEMENTWISEMATH_H
