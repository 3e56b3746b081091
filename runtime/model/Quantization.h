//===- Quantization.h - ggml tensor types and their dequantization --------===//
//
// The ggml type ids as GGUF stores them, the block geometry of every type
// (so the GGUF reader can size and validate any tensor, even one we cannot
// dequantize), and row dequantization to f32 or bf16 for the types the
// engine runs: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K. The block
// layouts are the documented ggml formats; the code is our own.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_QUANTIZATION_H
#define SPANC_RUNTIME_MODEL_QUANTIZATION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace spanc::model {

/// ggml tensor types with their on-disk ids (ids 4, 5 and 31..33, 36..38
/// were retired by ggml and are rejected).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

/// Elements per block and bytes per block of a type.
struct GgmlTypeTraits {
  llvm::StringRef name;
  uint32_t blockSize = 0;  ///< elements per block
  uint32_t blockBytes = 0; ///< bytes per block
};

/// The traits of a raw type id, or std::nullopt-like empty traits (blockSize
/// 0) when the id is not a ggml type.
GgmlTypeTraits ggmlTypeTraits(uint32_t typeId);
inline GgmlTypeTraits ggmlTypeTraits(GgmlType type) {
  return ggmlTypeTraits(static_cast<uint32_t>(type));
}
/// "Q4_K", or "type#N" for an unknown id.
std::string ggmlTypeName(GgmlType type);
/// Whether `typeId` names a ggml type (known block geometry).
inline bool isKnownGgmlType(uint32_t typeId) {
  return ggmlTypeTraits(typeId).blockSize != 0;
}

/// Whether dequantizeRow()/convertRowToBf16() handle `type`.
bool canDequantize(GgmlType type);

/// Checks that `count` elements of `type` can be dequantized: the type is
/// supported and `count` is a whole number of blocks.
llvm::Error checkDequantizable(GgmlType type, int64_t count);

/// Bytes that `count` elements of `type` occupy (count a multiple of the
/// block size).
inline uint64_t ggmlRowBytes(GgmlType type, int64_t count) {
  GgmlTypeTraits traits = ggmlTypeTraits(type);
  return static_cast<uint64_t>(count) / traits.blockSize * traits.blockBytes;
}

/// Dequantizes `count` consecutive elements of `type` from `src` into `dst`.
/// Preconditions (checked by checkDequantizable, asserted here): the type is
/// supported and `count` is a multiple of its block size.
void dequantizeRow(GgmlType type, const void *src, float *dst, int64_t count);

/// The same, rounding each value to bf16 (round to nearest even; NaN stays
/// NaN). `dst` holds raw bf16 bit patterns. Used to convert weights once at
/// load time for bf16 matmuls.
void convertRowToBf16(GgmlType type, const void *src, uint16_t *dst,
                      int64_t count);

/// IEEE half and bfloat16 conversions (exact for every input, including
/// subnormals, infinities and NaN).
float halfToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
inline float bf16ToFloat(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  __builtin_memcpy(&value, &word, sizeof(value));
  return value;
}
uint16_t floatToBf16(float value);

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_QUANTIZATION_H
