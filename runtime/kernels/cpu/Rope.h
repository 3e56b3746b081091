//===- Rope.h - Rotary position embedding on the CPU ----------------------===//
//
// RoPE in the two orders GGUF models use (normal: adjacent pairs, Llama;
// NeoX: halves, Qwen2), with base theta, linear or YaRN scaling and optional
// per-frequency factors. A RopeTable holds cos/sin per position so the
// per-token kernels do no transcendental math; the attention kernel reads
// the same table to rotate keys at their logical position (rope-in-kernel).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ROPE_H
#define SPANC_RUNTIME_KERNELS_CPU_ROPE_H

#include <cstdint>
#include <vector>

namespace spanc::cpu {

enum class RopeOrder { Normal, NeoX };
enum class RopeScaling { None, Linear, Yarn };

struct RopeConfig {
  int headDim = 0;
  int rotaryDim = 0; ///< leading dims that rotate (<= headDim, even)
  RopeOrder order = RopeOrder::Normal;
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::None;
  float factor = 1.0f;            ///< context extension factor (>= 1)
  int originalContext = 0;        ///< YaRN: the trained context length
  float yarnBetaFast = 32.0f;     ///< YaRN: high-frequency ramp bound
  float yarnBetaSlow = 1.0f;      ///< YaRN: low-frequency ramp bound
  float yarnExtFactor = 1.0f;     ///< YaRN: extrapolation mix (0 disables)
  float attentionFactor = 1.0f;   ///< multiplies cos and sin
  std::vector<float> freqFactors; ///< per pair divisor (Llama 3.1), or empty
};

/// The two dimensions that rotate together as pair `pair` (of rotaryDim /
/// 2): (2 pair, 2 pair + 1) in the normal order, (pair, pair + rotaryDim /
/// 2) in NeoX's.
struct RopePairDims {
  int first, second;
};
inline RopePairDims ropePairDims(RopeOrder order, int rotaryDim, int pair) {
  return order == RopeOrder::Normal ? RopePairDims{2 * pair, 2 * pair + 1}
                                    : RopePairDims{pair, pair + rotaryDim / 2};
}

/// cos and sin of every rotating pair for one position: writes
/// rotaryDim/2 values to each of `cosOut` and `sinOut`. Any position,
/// negative ones included (for rotating by a delta).
void ropeAngles(const RopeConfig &config, double position, float *cosOut,
                float *sinOut);

/// cos/sin for positions [0, numPositions): row p holds rotaryDim/2 cos
/// values followed by rotaryDim/2 sin values. The same values are also kept
/// pair-major (position fastest), so the attention kernel rotates the 16
/// keys of a dimension-major block with one vector load of 16 consecutive
/// positions' cos (and sin) per pair.
class RopeTable {
public:
  RopeTable() = default;
  RopeTable(const RopeConfig &config, int64_t numPositions);

  const RopeConfig &config() const { return config_; }
  int64_t numPositions() const { return numPositions_; }
  int halfDim() const { return config_.rotaryDim / 2; }
  /// rotaryDim floats: cos[0..half) then sin[0..half) for `position`.
  const float *row(int64_t position) const {
    return values_.data() + position * config_.rotaryDim;
  }
  /// cos (sin) of pair `pair` at positions 0, 1, ...: element p is
  /// row(p)[pair] (row(p)[half + pair]). Readable up to numPositions() +
  /// kPairMajorPadding (zeros past the end), so a 16-lane load at any valid
  /// position stays inside.
  const float *cosByPosition(int pair) const {
    return pairMajor_.data() + int64_t(pair) * pairStride();
  }
  const float *sinByPosition(int pair) const {
    return pairMajor_.data() + int64_t(halfDim() + pair) * pairStride();
  }
  static constexpr int64_t kPairMajorPadding = 16;

private:
  int64_t pairStride() const { return numPositions_ + kPairMajorPadding; }

  RopeConfig config_;
  int64_t numPositions_ = 0;
  std::vector<float> values_;
  std::vector<float> pairMajor_;
};

/// Rotates one head vector in place: `x[d * stride]` is dimension d, so the
/// same routine rotates a row-major query head (stride 1) and a key stored
/// dimension-major in a KV block (stride = block size). `cosSin` is a
/// RopeTable row (or ropeAngles' output laid out the same way).
void rotateHead(RopeOrder order, int rotaryDim, const float *cosSin, float *x,
                int64_t stride);

/// The shape of a batch of rows, each holding `numHeads` heads of `headDim`.
struct RopeShape {
  int64_t rows = 0;
  int64_t numHeads = 0;
  int64_t rowStride = 0; ///< floats between rows
};

/// Rotates every head of row r at `positions[r]` (each < table size).
void applyRope(const RopeShape &shape, const RopeTable &table,
               const int32_t *positions, float *x);

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ROPE_H
