//===- Gguf.cpp - A validating, memory-mapped GGUF (v2/v3) reader ---------===//

#include "runtime/model/Gguf.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <sys/mman.h>
#include <unistd.h>

using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace spanc::model {

namespace {

constexpr uint32_t maxDimensions = 4;     // GGML_MAX_DIMS
constexpr unsigned maxArrayNesting = 16;  // bounds the parser's recursion
constexpr uint64_t defaultAlignment = 32; // GGUF_DEFAULT_ALIGNMENT

/// Bytes of a fixed-size value type; 0 for strings and arrays, -1 (as
/// max) for an unknown id.
uint64_t scalarBytes(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::Bool:
    return 1;
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
    return 2;
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::Float32:
    return 4;
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
  case GgufValueType::Float64:
    return 8;
  case GgufValueType::String:
  case GgufValueType::Array:
    return 0;
  }
  return std::numeric_limits<uint64_t>::max();
}

bool isKnownValueType(uint32_t type) {
  return scalarBytes(type) != std::numeric_limits<uint64_t>::max();
}

/// Decodes one little-endian scalar of `type` at `bytes`.
GgufValue decodeScalar(GgufValueType type, const uint8_t *bytes) {
  uint64_t raw = 0;
  for (uint64_t i = scalarBytes(static_cast<uint32_t>(type)); i-- > 0;)
    raw = (raw << 8) | bytes[i];
  switch (type) {
  case GgufValueType::UInt8:
  case GgufValueType::UInt16:
  case GgufValueType::UInt32:
  case GgufValueType::UInt64:
    return GgufValue::makeUnsigned(type, raw);
  case GgufValueType::Int8:
    return GgufValue::makeSigned(type, static_cast<int8_t>(raw));
  case GgufValueType::Int16:
    return GgufValue::makeSigned(type, static_cast<int16_t>(raw));
  case GgufValueType::Int32:
    return GgufValue::makeSigned(type, static_cast<int32_t>(raw));
  case GgufValueType::Int64:
    return GgufValue::makeSigned(type, static_cast<int64_t>(raw));
  case GgufValueType::Float32: {
    uint32_t word = static_cast<uint32_t>(raw);
    float value;
    std::memcpy(&value, &word, sizeof(value));
    return GgufValue::makeFloat(type, value);
  }
  case GgufValueType::Float64: {
    double value;
    std::memcpy(&value, &raw, sizeof(value));
    return GgufValue::makeFloat(type, value);
  }
  case GgufValueType::Bool:
    return GgufValue::makeBool(raw != 0);
  default:
    return GgufValue();
  }
}

Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

/// Parses the header, metadata and tensor infos of a GGUF file held in a
/// buffer. Every read checks the bytes left first, so no read can pass the
/// end; arithmetic on sizes from the file is checked for overflow.
class GgufParser {
public:
  GgufParser(GgufFile &file)
      : file(file),
        base(reinterpret_cast<const uint8_t *>(file.buffer->getBufferStart())),
        size(file.buffer->getBufferSize()) {}

  Error parse();

private:
  Error fail(const Twine &message) const {
    return makeError(Twine(file.bufferName) + ": " + message);
  }
  uint64_t left() const { return size - position; }
  /// Fails unless `count` bytes are left for `what`.
  Error need(uint64_t count, const Twine &what) const {
    if (count <= left())
      return Error::success();
    return fail("truncated file: " + what + " at offset " + Twine(position) +
                " needs " + Twine(count) + " bytes but only " + Twine(left()) +
                " remain");
  }
  template <typename T> Error read(T &value, const Twine &what) {
    if (Error error = need(sizeof(T), what))
      return error;
    uint64_t raw = 0;
    for (size_t i = sizeof(T); i-- > 0;)
      raw = (raw << 8) | base[position + i];
    value = static_cast<T>(raw);
    position += sizeof(T);
    return Error::success();
  }
  Error readString(StringRef &value, const Twine &what);
  Error readValue(uint32_t type, unsigned depth, StringRef key,
                  GgufValue &value);
  Error parseTensorInfo(size_t index);
  Error placeTensors();
  Error checkOverlaps() const;

  GgufFile &file;
  const uint8_t *base;
  uint64_t size;
  uint64_t position = 0;
};

Error GgufParser::readString(StringRef &value, const Twine &what) {
  uint64_t length = 0;
  if (Error error = read(length, "the length of " + what))
    return error;
  if (length > left())
    return fail("string of length " + Twine(length) + " (" + what +
                ") at offset " + Twine(position) +
                " runs past the end of the file (" + Twine(left()) +
                " bytes remain)");
  value = StringRef(reinterpret_cast<const char *>(base + position), length);
  position += length;
  return Error::success();
}

Error GgufParser::readValue(uint32_t type, unsigned depth, StringRef key,
                            GgufValue &value) {
  if (!isKnownValueType(type))
    return fail("key '" + key + "' has unknown value type " + Twine(type));
  auto valueType = static_cast<GgufValueType>(type);
  if (valueType == GgufValueType::String) {
    StringRef text;
    if (Error error = readString(text, "the value of key '" + key + "'"))
      return error;
    value = GgufValue::makeString(text);
    return Error::success();
  }
  if (valueType != GgufValueType::Array) {
    uint64_t bytes = scalarBytes(type);
    if (Error error = need(bytes, "the value of key '" + key + "'"))
      return error;
    value = decodeScalar(valueType, base + position);
    if (valueType == GgufValueType::Bool && base[position] > 1)
      return fail("key '" + key + "': bool value " + Twine(base[position]) +
                  " is neither 0 nor 1");
    position += bytes;
    return Error::success();
  }

  if (depth >= maxArrayNesting)
    return fail("key '" + key + "': arrays nested deeper than " +
                Twine(maxArrayNesting) + " levels");
  uint32_t elementType = 0;
  uint64_t count = 0;
  if (Error error =
          read(elementType, "the element type of array key '" + key + "'"))
    return error;
  if (!isKnownValueType(elementType))
    return fail("array key '" + key + "' has unknown element type " +
                Twine(elementType));
  if (Error error = read(count, "the length of array key '" + key + "'"))
    return error;
  // Each element takes at least this many bytes, so a count the file
  // cannot hold is rejected before anything is allocated.
  uint64_t elementBytes = scalarBytes(elementType);
  uint64_t minimumBytes = elementBytes;
  if (elementType == static_cast<uint32_t>(GgufValueType::String))
    minimumBytes = 8;
  else if (elementType == static_cast<uint32_t>(GgufValueType::Array))
    minimumBytes = 12;
  if (count > left() / minimumBytes)
    return fail("array key '" + key + "' declares " + Twine(count) + " " +
                ggufValueTypeName(static_cast<GgufValueType>(elementType)) +
                " elements at offset " + Twine(position) + ", more than the " +
                Twine(left()) + " remaining bytes can hold");
  value = GgufValue();
  value.valueType = GgufValueType::Array;
  value.arrayElementType = static_cast<GgufValueType>(elementType);
  value.arrayCount = count;
  if (elementBytes != 0) {
    value.packedElements = base + position;
    position += count * elementBytes;
    if (value.arrayElementType == GgufValueType::Bool)
      for (uint64_t i = 0; i < count; ++i)
        if (value.packedElements[i] > 1)
          return fail("array key '" + key + "': bool element " + Twine(i) +
                      " is neither 0 nor 1");
    return Error::success();
  }
  value.decodedElements.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::string elementKey = (key + "[" + Twine(i) + "]").str();
    if (Error error = readValue(elementType, depth + 1, elementKey,
                                value.decodedElements[i]))
      return error;
  }
  return Error::success();
}

Error GgufParser::parseTensorInfo(size_t index) {
  GgufTensor tensor;
  StringRef name;
  if (Error error = readString(name, "the name of tensor #" + Twine(index)))
    return error;
  tensor.name = name.str();
  std::string label = ("tensor '" + name + "'").str();
  uint32_t numDimensions = 0;
  if (Error error = read(numDimensions, "the dimension count of " + label))
    return error;
  if (numDimensions > maxDimensions)
    return fail(label + " has " + Twine(numDimensions) +
                " dimensions (at most " + Twine(maxDimensions) + ")");
  uint64_t numElements = 1;
  for (uint32_t dimension = 0; dimension < numDimensions; ++dimension) {
    uint64_t extent = 0;
    if (Error error =
            read(extent, "dimension " + Twine(dimension) + " of " + label))
      return error;
    if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (extent != 0 && numElements > static_cast<uint64_t>(
                                          std::numeric_limits<int64_t>::max()) /
                                          extent))
      return fail(label + ": the element count overflows at dimension " +
                  Twine(dimension) + " (extent " + Twine(extent) + ")");
    numElements *= extent;
    tensor.shape.push_back(extent);
  }
  uint32_t typeId = 0;
  if (Error error = read(typeId, "the type of " + label))
    return error;
  GgmlTypeTraits traits = ggmlTypeTraits(typeId);
  if (traits.blockSize == 0)
    return fail(label + " has unknown ggml type " + Twine(typeId));
  tensor.type = static_cast<GgmlType>(typeId);
  uint64_t rowLength = tensor.shape.empty() ? 1 : tensor.shape[0];
  if (rowLength % traits.blockSize != 0)
    return fail(label + ": row length " + Twine(rowLength) +
                " is not a multiple of the " + traits.name + " block size " +
                Twine(traits.blockSize));
  // numElements < 2^63 and blockBytes <= 292 < blockSize * 2^9 for every
  // type with blockSize 256; for blockSize 1 or 32 the product is checked.
  uint64_t blocks = numElements / traits.blockSize;
  if (blocks != 0 &&
      traits.blockBytes > std::numeric_limits<uint64_t>::max() / blocks)
    return fail(label + ": its size in bytes overflows");
  tensor.numBytes = blocks * traits.blockBytes;
  if (Error error = read(tensor.offset, "the data offset of " + label))
    return error;
  if (!file.tensorIndex.try_emplace(tensor.name, file.tensorList.size()).second)
    return fail("duplicate tensor '" + name + "'");
  file.tensorList.push_back(std::move(tensor));
  return Error::success();
}

Error GgufParser::placeTensors() {
  uint64_t alignment = file.dataAlignment;
  // Align the end of the tensor infos up to where the data section starts.
  uint64_t padding = (alignment - position % alignment) % alignment;
  if (padding > left()) {
    // No data section at all is fine only when every tensor is empty.
    file.dataStart = size;
  } else {
    file.dataStart = position + padding;
  }
  uint64_t dataBytes = size - file.dataStart;
  for (GgufTensor &tensor : file.tensorList) {
    if (tensor.offset % alignment != 0)
      return fail("tensor '" + tensor.name + "' has data offset " +
                  Twine(tensor.offset) + ", not a multiple of the alignment " +
                  Twine(alignment));
    if (tensor.offset > dataBytes ||
        tensor.numBytes > dataBytes - tensor.offset)
      return fail("tensor '" + tensor.name + "' data (offset " +
                  Twine(tensor.offset) + ", " + Twine(tensor.numBytes) +
                  " bytes) runs past the end of the file (the data section "
                  "holds " +
                  Twine(dataBytes) + " bytes)");
    tensor.data = base + file.dataStart + tensor.offset;
  }
  return checkOverlaps();
}

Error GgufParser::checkOverlaps() const {
  // Each tensor's bytes are its own: a tensor whose type or shape was
  // changed without moving the others (a Q4_1 matrix relabelled F32 reads
  // 4.5 times its bytes) or two tensors at one offset read each other's
  // data, and the model runs on garbage. Sorted by offset, each non-empty
  // tensor must end where or before the next one starts.
  std::vector<const GgufTensor *> placed;
  placed.reserve(file.tensorList.size());
  for (const GgufTensor &tensor : file.tensorList)
    if (tensor.numBytes != 0)
      placed.push_back(&tensor);
  std::stable_sort(placed.begin(), placed.end(),
                   [](const GgufTensor *left, const GgufTensor *right) {
                     return left->offset < right->offset;
                   });
  for (size_t index = 1; index < placed.size(); ++index) {
    const GgufTensor &before = *placed[index - 1], &after = *placed[index];
    if (before.offset + before.numBytes <= after.offset)
      continue;
    std::string shape;
    for (uint64_t extent : before.shape)
      shape += (shape.empty() ? "" : ", ") + std::to_string(extent);
    if (before.offset == after.offset)
      return fail("tensors '" + before.name + "' and '" + after.name +
                  "' have the same data offset " + Twine(before.offset) +
                  ": each tensor needs bytes of its own");
    return fail("tensor '" + before.name + "' (" + ggmlTypeName(before.type) +
                " [" + shape + "], " + Twine(before.numBytes) +
                " bytes at offset " + Twine(before.offset) +
                ") overlaps tensor '" + after.name + "' at offset " +
                Twine(after.offset) +
                ": its type or shape does not match its data");
  }
  return Error::success();
}

Error GgufParser::parse() {
  if (size < 4)
    return fail("truncated file: " + Twine(size) +
                " bytes is too small for a GGUF header");
  if (std::memcmp(base, "GGUF", 4) != 0)
    return fail("bad magic 0x" +
                llvm::utohexstr(static_cast<uint32_t>(base[0]) |
                                    static_cast<uint32_t>(base[1]) << 8 |
                                    static_cast<uint32_t>(base[2]) << 16 |
                                    static_cast<uint32_t>(base[3]) << 24,
                                /*LowerCase=*/true) +
                " (not a GGUF file: expected \"GGUF\")");
  position = 4;
  uint32_t version = 0;
  if (Error error = read(version, "the GGUF version"))
    return error;
  if (version == 1)
    return fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    if ((version & 0xffff) == 0 && (version >> 16) != 0)
      return fail("GGUF version " + Twine(version) +
                  " looks byte-swapped: big-endian GGUF is not supported");
    return fail("unsupported GGUF version " + Twine(version) +
                " (only versions 2 and 3)");
  }
  file.formatVersion = version;
  uint64_t tensorCount = 0, entryCount = 0;
  if (Error error = read(tensorCount, "the tensor count"))
    return error;
  if (Error error = read(entryCount, "the metadata entry count"))
    return error;
  // A metadata entry takes at least 12 bytes, a tensor info at least 24.
  if (entryCount > left() / 12)
    return fail("metadata entry count " + Twine(entryCount) +
                " is more than the " + Twine(left()) +
                " remaining bytes can hold");
  if (tensorCount > left() / 24)
    return fail("tensor count " + Twine(tensorCount) + " is more than the " +
                Twine(left()) + " remaining bytes can hold");

  file.entries.reserve(entryCount);
  for (uint64_t index = 0; index < entryCount; ++index) {
    StringRef key;
    if (Error error =
            readString(key, "the key of metadata entry #" + Twine(index)))
      return error;
    uint32_t type = 0;
    if (Error error = read(type, "the value type of key '" + key + "'"))
      return error;
    GgufMetadataEntry entry;
    entry.key = key.str();
    if (Error error = readValue(type, 0, key, entry.value))
      return error;
    if (!file.entryIndex.try_emplace(key, file.entries.size()).second)
      return fail("duplicate metadata key '" + key + "'");
    file.entries.push_back(std::move(entry));
  }

  if (const GgufValue *value = file.find("general.alignment")) {
    std::optional<uint64_t> alignment = value->asUnsigned();
    if (!alignment)
      return fail("key 'general.alignment' must be an unsigned integer, not " +
                  ggufValueTypeName(value->type()));
    if (*alignment == 0 || !llvm::isPowerOf2_64(*alignment) ||
        *alignment > (1u << 30))
      return fail("key 'general.alignment' is " + Twine(*alignment) +
                  ", not a power of two up to 2^30");
    file.dataAlignment = *alignment;
  }

  file.tensorList.reserve(tensorCount);
  for (uint64_t index = 0; index < tensorCount; ++index)
    if (Error error = parseTensorInfo(index))
      return error;
  return placeTensors();
}

//===----------------------------------------------------------------------===//
// GgufValue
//===----------------------------------------------------------------------===//

StringRef ggufValueTypeName(GgufValueType type) {
  switch (type) {
  case GgufValueType::UInt8:
    return "uint8";
  case GgufValueType::Int8:
    return "int8";
  case GgufValueType::UInt16:
    return "uint16";
  case GgufValueType::Int16:
    return "int16";
  case GgufValueType::UInt32:
    return "uint32";
  case GgufValueType::Int32:
    return "int32";
  case GgufValueType::Float32:
    return "float32";
  case GgufValueType::Bool:
    return "bool";
  case GgufValueType::String:
    return "string";
  case GgufValueType::Array:
    return "array";
  case GgufValueType::UInt64:
    return "uint64";
  case GgufValueType::Int64:
    return "int64";
  case GgufValueType::Float64:
    return "float64";
  }
  return "unknown";
}

bool GgufValue::isInteger() const {
  switch (valueType) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
    return true;
  default:
    return false;
  }
}

static bool isSignedType(GgufValueType type) {
  return type == GgufValueType::Int8 || type == GgufValueType::Int16 ||
         type == GgufValueType::Int32 || type == GgufValueType::Int64;
}

std::optional<uint64_t> GgufValue::asUnsigned() const {
  if (!isInteger())
    return std::nullopt;
  if (isSignedType(valueType))
    return signedValue < 0 ? std::nullopt
                           : std::optional<uint64_t>(signedValue);
  return unsignedValue;
}

std::optional<int64_t> GgufValue::asSigned() const {
  if (!isInteger())
    return std::nullopt;
  if (isSignedType(valueType))
    return signedValue;
  if (unsignedValue >
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return static_cast<int64_t>(unsignedValue);
}

std::optional<double> GgufValue::asFloat() const {
  if (!isFloat())
    return std::nullopt;
  return floatValue;
}

std::optional<bool> GgufValue::asBool() const {
  if (valueType != GgufValueType::Bool)
    return std::nullopt;
  return unsignedValue != 0;
}

std::optional<StringRef> GgufValue::asString() const {
  if (valueType != GgufValueType::String)
    return std::nullopt;
  return stringValue;
}

GgufValue GgufValue::element(uint64_t index) const {
  if (!isArray() || index >= arrayCount)
    return GgufValue();
  if (packedElements) {
    uint64_t bytes = scalarBytes(static_cast<uint32_t>(arrayElementType));
    return decodeScalar(arrayElementType, packedElements + index * bytes);
  }
  return decodedElements[index];
}

GgufValue GgufValue::makeUnsigned(GgufValueType type, uint64_t value) {
  GgufValue result;
  result.valueType = type;
  result.unsignedValue = value;
  return result;
}

GgufValue GgufValue::makeSigned(GgufValueType type, int64_t value) {
  GgufValue result;
  result.valueType = type;
  result.signedValue = value;
  return result;
}

GgufValue GgufValue::makeFloat(GgufValueType type, double value) {
  GgufValue result;
  result.valueType = type;
  result.floatValue = value;
  return result;
}

GgufValue GgufValue::makeBool(bool value) {
  GgufValue result;
  result.valueType = GgufValueType::Bool;
  result.unsignedValue = value ? 1 : 0;
  return result;
}

GgufValue GgufValue::makeString(StringRef value) {
  GgufValue result;
  result.valueType = GgufValueType::String;
  result.stringValue = value;
  return result;
}

//===----------------------------------------------------------------------===//
// GgufTensor
//===----------------------------------------------------------------------===//

uint64_t GgufTensor::numElements() const {
  uint64_t count = 1;
  for (uint64_t extent : shape)
    count *= extent;
  return count;
}

uint64_t GgufTensor::numRows() const {
  if (shape.empty() || shape[0] == 0)
    return shape.empty() ? 1 : 0;
  return numElements() / shape[0];
}

uint64_t GgufTensor::rowBytes() const {
  return ggmlRowBytes(type, shape.empty() ? 1 : shape[0]);
}

//===----------------------------------------------------------------------===//
// GgufFile
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<GgufFile>> GgufFile::open(StringRef path) {
  // No null terminator requested, so LLVM maps large files read-only
  // instead of copying them.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false,
                                  /*IsVolatile=*/false);
  if (!buffer)
    return makeError(path + ": cannot open: " + buffer.getError().message());
  return openBuffer(std::move(*buffer));
}

Expected<std::unique_ptr<GgufFile>>
GgufFile::openBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bufferName = buffer->getBufferIdentifier().str();
  file->buffer = std::move(buffer);
  GgufParser parser(*file);
  if (Error error = parser.parse())
    return error;
  return file;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::openBuffer(StringRef bytes,
                                                         StringRef name) {
  std::unique_ptr<llvm::WritableMemoryBuffer> buffer =
      llvm::WritableMemoryBuffer::getNewUninitMemBuffer(bytes.size(), name);
  if (!bytes.empty())
    std::memcpy(buffer->getBufferStart(), bytes.data(), bytes.size());
  return openBuffer(std::unique_ptr<llvm::MemoryBuffer>(std::move(buffer)));
}

void GgufFile::releaseTensorPages() const {
  if (buffer->getBufferKind() != llvm::MemoryBuffer::MemoryBuffer_MMap)
    return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = uintptr_t(buffer->getBufferStart()) + dataStart;
  const uintptr_t end = uintptr_t(buffer->getBufferEnd());
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (first < last)
    (void)madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
}

const GgufValue *GgufFile::find(StringRef key) const {
  auto found = entryIndex.find(key);
  if (found == entryIndex.end())
    return nullptr;
  return &entries[found->second].value;
}

namespace {

Error missingKey(StringRef file, StringRef key) {
  return makeError(file + ": missing metadata key '" + key + "'");
}

Error wrongType(StringRef file, StringRef key, const GgufValue &value,
                StringRef expected) {
  return makeError(file + ": metadata key '" + key + "' is " +
                   ggufValueTypeName(value.type()) + ", expected " + expected);
}

} // namespace

Expected<StringRef> GgufFile::getString(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (std::optional<StringRef> text = value->asString())
    return *text;
  return wrongType(bufferName, key, *value, "string");
}

Expected<StringRef> GgufFile::getString(StringRef key,
                                        StringRef fallback) const {
  return contains(key) ? getString(key) : Expected<StringRef>(fallback);
}

Expected<uint64_t> GgufFile::getUnsigned(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (std::optional<uint64_t> number = value->asUnsigned())
    return *number;
  if (value->isInteger())
    return makeError(bufferName + ": metadata key '" + key +
                     "' is negative, expected an unsigned integer");
  return wrongType(bufferName, key, *value, "an unsigned integer");
}

Expected<uint64_t> GgufFile::getUnsigned(StringRef key,
                                         uint64_t fallback) const {
  return contains(key) ? getUnsigned(key) : Expected<uint64_t>(fallback);
}

Expected<int64_t> GgufFile::getSigned(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (std::optional<int64_t> number = value->asSigned())
    return *number;
  if (value->isInteger())
    return makeError(bufferName + ": metadata key '" + key +
                     "' does not fit a signed 64-bit integer");
  return wrongType(bufferName, key, *value, "an integer");
}

Expected<int64_t> GgufFile::getSigned(StringRef key, int64_t fallback) const {
  return contains(key) ? getSigned(key) : Expected<int64_t>(fallback);
}

Expected<double> GgufFile::getFloat(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (std::optional<double> number = value->asFloat())
    return *number;
  return wrongType(bufferName, key, *value, "float32 or float64");
}

Expected<double> GgufFile::getFloat(StringRef key, double fallback) const {
  return contains(key) ? getFloat(key) : Expected<double>(fallback);
}

Expected<bool> GgufFile::getBool(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (std::optional<bool> flag = value->asBool())
    return *flag;
  return wrongType(bufferName, key, *value, "bool");
}

Expected<bool> GgufFile::getBool(StringRef key, bool fallback) const {
  return contains(key) ? getBool(key) : Expected<bool>(fallback);
}

namespace {

Error wrongElementType(StringRef file, StringRef key, const GgufValue &value,
                       StringRef expected) {
  if (!value.isArray())
    return wrongType(file, key, value, expected);
  return makeError(file + ": metadata key '" + key + "' is an array of " +
                   ggufValueTypeName(value.elementType()) + ", expected " +
                   expected);
}

} // namespace

Expected<std::vector<StringRef>> GgufFile::getStringArray(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (!value->isArray() || value->elementType() != GgufValueType::String)
    return wrongElementType(bufferName, key, *value, "an array of strings");
  std::vector<StringRef> result;
  result.reserve(value->arraySize());
  for (uint64_t i = 0; i < value->arraySize(); ++i)
    result.push_back(*value->element(i).asString());
  return result;
}

Expected<std::vector<float>> GgufFile::getFloatArray(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (!value->isArray() || (value->elementType() != GgufValueType::Float32 &&
                            value->elementType() != GgufValueType::Float64))
    return wrongElementType(bufferName, key, *value, "an array of floats");
  std::vector<float> result(value->arraySize());
  for (uint64_t i = 0; i < result.size(); ++i)
    result[i] = static_cast<float>(*value->element(i).asFloat());
  return result;
}

Expected<std::vector<int64_t>> GgufFile::getIntArray(StringRef key) const {
  const GgufValue *value = find(key);
  if (!value)
    return missingKey(bufferName, key);
  if (!value->isArray() ||
      !GgufValue::makeUnsigned(value->elementType(), 0).isInteger())
    return wrongElementType(bufferName, key, *value, "an array of integers");
  std::vector<int64_t> result(value->arraySize());
  for (uint64_t i = 0; i < result.size(); ++i) {
    std::optional<int64_t> number = value->element(i).asSigned();
    if (!number)
      return makeError(bufferName + ": metadata key '" + key + "' element " +
                       Twine(i) + " does not fit a signed 64-bit integer");
    result[i] = *number;
  }
  return result;
}

const GgufTensor *GgufFile::findTensor(StringRef name) const {
  auto found = tensorIndex.find(name);
  if (found == tensorIndex.end())
    return nullptr;
  return &tensorList[found->second];
}

Expected<const GgufTensor *> GgufFile::getTensor(StringRef name) const {
  if (const GgufTensor *tensor = findTensor(name))
    return tensor;
  return makeError(bufferName + ": missing tensor '" + name + "'");
}

Expected<const GgufTensor *> GgufFile::getTensorOfShape(StringRef name,
                                                        uint64_t columns,
                                                        uint64_t rows) const {
  const GgufTensor *tensor = findTensor(name);
  if (!tensor)
    return tensorError(name, "missing");
  bool shapeOk =
      rows == 0 ? tensor->shape.size() == 1 && tensor->shape[0] == columns
                : tensor->shape.size() == 2 && tensor->shape[0] == columns &&
                      tensor->shape[1] == rows;
  if (!shapeOk) {
    std::string shape;
    for (uint64_t dim : tensor->shape)
      shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
    return tensorError(
        name, "shape [" + shape + "], expected [" + llvm::Twine(columns) +
                  (rows ? ", " + std::to_string(rows) : "") + "]");
  }
  return tensor;
}

llvm::Error GgufFile::tensorError(StringRef name,
                                  const llvm::Twine &message) const {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      (llvm::Twine(bufferName) + ": tensor '" + name + "': " + message).str());
}

} // namespace spanc::model
