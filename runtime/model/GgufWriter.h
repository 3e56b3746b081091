//===- GgufWriter.h - Writes small GGUF files (synthetic test models) -----===//
//
// Tests and the fuzz corpus need GGUF files with exact contents: tiny
// vocabularies, hand-made quantized blocks, and deliberately broken headers.
// The writer lays out a v2 or v3 file in memory; callers may then corrupt
// the bytes to exercise the reader's checks.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_GGUFWRITER_H
#define SPANC_RUNTIME_MODEL_GGUFWRITER_H

#include "runtime/model/Gguf.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spanc::model {

/// A metadata value to write: a scalar, a string or a (possibly nested)
/// array. Numbers are kept as their little-endian bytes.
class GgufWriterValue {
public:
  static GgufWriterValue u8(uint8_t value);
  static GgufWriterValue i8(int8_t value);
  static GgufWriterValue u16(uint16_t value);
  static GgufWriterValue i16(int16_t value);
  static GgufWriterValue u32(uint32_t value);
  static GgufWriterValue i32(int32_t value);
  static GgufWriterValue u64(uint64_t value);
  static GgufWriterValue i64(int64_t value);
  static GgufWriterValue f32(float value);
  static GgufWriterValue f64(double value);
  static GgufWriterValue boolean(bool value);
  static GgufWriterValue string(llvm::StringRef value);
  /// An array whose elements all have type `elementType` (Array for nested
  /// arrays); an empty array needs the type spelled out.
  static GgufWriterValue array(GgufValueType elementType,
                               std::vector<GgufWriterValue> elements);

  /// A copy of a value read from a file (to derive files from others).
  static GgufWriterValue fromValue(const GgufValue &value);

  GgufValueType type() const { return valueType; }
  /// Appends the value's encoding (without its type tag) to `out`.
  void encode(std::string &out) const;

private:
  GgufValueType valueType = GgufValueType::UInt8;
  std::string bytes; ///< scalars: little-endian bytes; strings: the text
  GgufValueType elementType = GgufValueType::UInt8;
  std::vector<GgufWriterValue> elements;
};

class GgufWriter {
public:
  explicit GgufWriter(uint32_t version = 3) : version(version) {}

  /// Adds a key (in call order). general.alignment set this way also
  /// changes the layout.
  void add(llvm::StringRef key, GgufWriterValue value);
  void addString(llvm::StringRef key, llvm::StringRef value);
  void addUInt32(llvm::StringRef key, uint32_t value);
  void addInt32(llvm::StringRef key, int32_t value);
  void addFloat32(llvm::StringRef key, float value);
  void addBool(llvm::StringRef key, bool value);
  void addStringArray(llvm::StringRef key, llvm::ArrayRef<std::string> values);
  void addFloat32Array(llvm::StringRef key, llvm::ArrayRef<float> values);
  void addInt32Array(llvm::StringRef key, llvm::ArrayRef<int32_t> values);

  /// Adds a tensor with `shape` in GGUF order; `data` must hold exactly its
  /// bytes.
  void addTensor(llvm::StringRef name, GgmlType type,
                 llvm::ArrayRef<uint64_t> shape, llvm::StringRef data);
  /// Adds an F32 tensor from values.
  void addTensorF32(llvm::StringRef name, llvm::ArrayRef<uint64_t> shape,
                    llvm::ArrayRef<float> values);

  /// The file's bytes.
  std::string write() const;
  /// Writes the file to `path`.
  llvm::Error writeToFile(llvm::StringRef path) const;

private:
  /// The bytes before the tensor data (padded to the alignment); each
  /// tensor's offset in the data section goes to `offsets`.
  std::string header(std::vector<uint64_t> &offsets) const;
  uint64_t alignUp(uint64_t offset) const {
    return (offset + alignment - 1) / alignment * alignment;
  }

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;
    std::string data;
  };
  uint32_t version;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, GgufWriterValue>> entries;
  std::vector<Tensor> tensors;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_GGUFWRITER_H
