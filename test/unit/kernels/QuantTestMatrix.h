//===- QuantTestMatrix.h - Random 4/8-bit GGUF matrices for kernel tests --===//
//
// Q4_1 and Q8_0 matrices of random blocks in the GGUF layout (Q8_0 values
// in -127..127, as GGUF quantizers write them), with their
// dequantized values computed as the GGUF reader does (the multiply and the
// add of q * d + m rounded separately): for QuantGemv's tests and the AMX
// GEMM's borrowed weights.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_UNIT_KERNELS_QUANTTESTMATRIX_H
#define SPANC_TEST_UNIT_KERNELS_QUANTTESTMATRIX_H

#include "runtime/kernels/cpu/QuantGemv.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace spanc::test {

/// A normal f16 value from its bits (the test draws only normal scales).
inline float halfValue(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1f;
  float value =
      (1.0f + float(bits & 0x3ff) / 1024.0f) * std::ldexp(1.0f, exponent - 15);
  return bits & 0x8000 ? -value : value;
}

struct TestMatrix {
  cpu::QuantMatrix view;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized; ///< [rows][columns]
  std::vector<float> minimums;    ///< Q4_1: [rows][blocks]
};

inline TestMatrix makeMatrix(cpu::QuantFormat format, int64_t rows,
                             int64_t columns, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), q80Value(-127, 127);
  // Scales 2^-9 .. 2^-4, signs on the Q4_1 minimum only.
  std::uniform_int_distribution<int> halfBits(0x1800, 0x2c00);
  TestMatrix matrix;
  const int64_t blocks = columns / 32,
                blockBytes = cpu::quantBlockBytes(format);
  matrix.bytes.resize(size_t(rows * blocks * blockBytes));
  matrix.dequantized.resize(size_t(rows * columns));
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t block = 0; block < blocks; ++block) {
      uint8_t *data = matrix.bytes.data() + (row * blocks + block) * blockBytes;
      float *out = matrix.dequantized.data() + row * columns + block * 32;
      uint16_t scaleBits = uint16_t(halfBits(rng));
      std::memcpy(data, &scaleBits, 2);
      float scale = halfValue(scaleBits);
      if (format == cpu::QuantFormat::Q4_1) {
        uint16_t minimumBits = uint16_t(halfBits(rng) | (byte(rng) & 1) << 15);
        std::memcpy(data + 2, &minimumBits, 2);
        float minimum = halfValue(minimumBits);
        matrix.minimums.push_back(minimum);
        for (int i = 0; i < 16; ++i) {
          data[4 + i] = uint8_t(byte(rng));
          out[i] = scale * float(data[4 + i] & 0xf) + minimum;
          out[i + 16] = scale * float(data[4 + i] >> 4) + minimum;
        }
      } else {
        for (int i = 0; i < 32; ++i) {
          data[2 + i] = uint8_t(int8_t(q80Value(rng)));
          out[i] = scale * float(int8_t(data[2 + i]));
        }
      }
    }
  matrix.view = cpu::QuantMatrix{format, matrix.bytes.data(), rows, columns,
                                 blocks * blockBytes};
  return matrix;
}

} // namespace spanc::test

#endif // SPANC_TEST_UNIT_KERNELS_QUANTTESTMATRIX_H
