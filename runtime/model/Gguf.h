//===- Gguf.h - A validating, memory-mapped GGUF (v2/v3) reader -----------===//
//
// GGUF is llama.cpp's model container: a header, typed key/value metadata,
// tensor infos (name, shape, ggml type, offset) and an aligned data section.
// The reader maps the file, parses everything up front and checks every
// count, length and offset against the file size without overflow, so a
// truncated or corrupt file yields an error naming the key or tensor at
// fault instead of a crash. Tensor views point into the mapping.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_GGUF_H
#define SPANC_RUNTIME_MODEL_GGUF_H

#include "runtime/model/Quantization.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spanc::model {

/// Metadata value types with their GGUF ids.
enum class GgufValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

/// "uint32", "string", "array", ...
llvm::StringRef ggufValueTypeName(GgufValueType type);

/// One metadata value. Scalars are held decoded; strings point into the
/// file; arrays of numbers keep a pointer to their packed little-endian
/// elements (tokenizer score tables are large), arrays of strings or arrays
/// keep their decoded elements.
class GgufValue {
public:
  GgufValueType type() const { return valueType; }
  bool isArray() const { return valueType == GgufValueType::Array; }
  bool isString() const { return valueType == GgufValueType::String; }
  bool isInteger() const;
  bool isFloat() const {
    return valueType == GgufValueType::Float32 ||
           valueType == GgufValueType::Float64;
  }

  /// Scalar accessors: nullopt when the value has another kind, or (for the
  /// integers) does not fit the requested range.
  std::optional<uint64_t> asUnsigned() const;
  std::optional<int64_t> asSigned() const;
  /// Float32/Float64 (integers are not silently converted).
  std::optional<double> asFloat() const;
  std::optional<bool> asBool() const;
  std::optional<llvm::StringRef> asString() const;

  /// Arrays: element type (Array for nested arrays), count, and element i
  /// decoded as a value. Empty/0 for non-arrays.
  GgufValueType elementType() const { return arrayElementType; }
  uint64_t arraySize() const { return isArray() ? arrayCount : 0; }
  GgufValue element(uint64_t index) const;

  /// Scalar constructors (used by the reader and by tests).
  static GgufValue makeUnsigned(GgufValueType type, uint64_t value);
  static GgufValue makeSigned(GgufValueType type, int64_t value);
  static GgufValue makeFloat(GgufValueType type, double value);
  static GgufValue makeBool(bool value);
  static GgufValue makeString(llvm::StringRef value);

private:
  friend class GgufParser;
  GgufValueType valueType = GgufValueType::UInt8;
  union {
    uint64_t unsignedValue;
    int64_t signedValue;
    double floatValue;
  };
  llvm::StringRef stringValue;
  GgufValueType arrayElementType = GgufValueType::UInt8;
  uint64_t arrayCount = 0;
  const uint8_t *packedElements = nullptr; ///< numeric arrays
  std::vector<GgufValue> decodedElements;  ///< string and nested arrays

public:
  GgufValue() : unsignedValue(0) {}
};

/// A key and its value, in file order.
struct GgufMetadataEntry {
  std::string key;
  GgufValue value;
};

/// A view of one tensor: shape in GGUF order (shape[0] is the contiguous
/// row length), data pointing into the mapped file.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  llvm::SmallVector<uint64_t, 4> shape;
  const uint8_t *data = nullptr;
  uint64_t numBytes = 0;
  uint64_t offset = 0; ///< relative to the start of the data section

  uint64_t numElements() const;
  /// Rows of shape[0] elements (the product of the other dimensions).
  uint64_t numRows() const;
  /// Bytes of one row of shape[0] elements.
  uint64_t rowBytes() const;
};

class GgufFile {
public:
  /// Maps and parses `path`. Errors start with the path.
  static llvm::Expected<std::unique_ptr<GgufFile>> open(llvm::StringRef path);
  /// Parses an in-memory file (tests, fuzzing); `name` prefixes errors.
  static llvm::Expected<std::unique_ptr<GgufFile>>
  openBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer);
  /// Copies `bytes` into an aligned buffer and parses them.
  static llvm::Expected<std::unique_ptr<GgufFile>>
  openBuffer(llvm::StringRef bytes, llvm::StringRef name = "<buffer>");

  llvm::StringRef name() const { return bufferName; }
  uint32_t version() const { return formatVersion; }
  uint64_t alignment() const { return dataAlignment; }
  /// File offset where the tensor data section starts.
  uint64_t dataOffset() const { return dataStart; }
  uint64_t fileSize() const { return buffer->getBufferSize(); }

  llvm::ArrayRef<GgufMetadataEntry> metadata() const { return entries; }
  const GgufValue *find(llvm::StringRef key) const;
  bool contains(llvm::StringRef key) const { return find(key) != nullptr; }

  /// Typed getters. The one-argument forms fail when the key is absent; the
  /// forms with a default return it when absent. Both fail, naming the key,
  /// when the value has the wrong type. Integer getters accept any integer
  /// type whose value fits.
  llvm::Expected<llvm::StringRef> getString(llvm::StringRef key) const;
  llvm::Expected<llvm::StringRef> getString(llvm::StringRef key,
                                            llvm::StringRef fallback) const;
  llvm::Expected<uint64_t> getUnsigned(llvm::StringRef key) const;
  llvm::Expected<uint64_t> getUnsigned(llvm::StringRef key,
                                       uint64_t fallback) const;
  llvm::Expected<int64_t> getSigned(llvm::StringRef key) const;
  llvm::Expected<int64_t> getSigned(llvm::StringRef key,
                                    int64_t fallback) const;
  /// Float32/Float64 values.
  llvm::Expected<double> getFloat(llvm::StringRef key) const;
  llvm::Expected<double> getFloat(llvm::StringRef key, double fallback) const;
  llvm::Expected<bool> getBool(llvm::StringRef key) const;
  llvm::Expected<bool> getBool(llvm::StringRef key, bool fallback) const;
  /// Arrays (absent key: error). Element types must match: strings for
  /// getStringArray, Float32/Float64 for getFloatArray, integers for
  /// getIntArray.
  llvm::Expected<std::vector<llvm::StringRef>>
  getStringArray(llvm::StringRef key) const;
  llvm::Expected<std::vector<float>> getFloatArray(llvm::StringRef key) const;
  llvm::Expected<std::vector<int64_t>> getIntArray(llvm::StringRef key) const;

  llvm::ArrayRef<GgufTensor> tensors() const { return tensorList; }
  const GgufTensor *findTensor(llvm::StringRef name) const;
  /// Like findTensor, but an error naming the tensor when absent.
  llvm::Expected<const GgufTensor *> getTensor(llvm::StringRef name) const;
  /// Like getTensor, and checks it is a [columns, rows] (GGUF order) matrix,
  /// or a [columns] vector when rows == 0.
  llvm::Expected<const GgufTensor *>
  getTensorOfShape(llvm::StringRef name, uint64_t columns, uint64_t rows) const;
  /// Drops the tensor data's resident pages of a mapped file (madvise
  /// DONTNEED; read-only, so a later read faults the same bytes back from
  /// the page cache): for after the weights are packed. No-op for an
  /// in-memory buffer.
  void releaseTensorPages() const;
  /// "FILE: tensor 'NAME': MESSAGE", the error a loader gives about a tensor.
  llvm::Error tensorError(llvm::StringRef name,
                          const llvm::Twine &message) const;

private:
  friend class GgufParser;
  GgufFile() = default;

  std::unique_ptr<llvm::MemoryBuffer> buffer;
  std::string bufferName;
  uint32_t formatVersion = 0;
  uint64_t dataAlignment = 32;
  uint64_t dataStart = 0;
  std::vector<GgufMetadataEntry> entries;
  llvm::StringMap<size_t> entryIndex;
  std::vector<GgufTensor> tensorList;
  llvm::StringMap<size_t> tensorIndex;
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_GGUF_H
