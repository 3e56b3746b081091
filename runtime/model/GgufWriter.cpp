//===- GgufWriter.cpp - Writes small GGUF files (synthetic test models) ---===//

#include "runtime/model/GgufWriter.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace spanc::model {

namespace {

template <typename T> std::string littleEndian(T value) {
  uint64_t raw = 0;
  std::memcpy(&raw, &value, sizeof(T));
  std::string bytes(sizeof(T), '\0');
  for (size_t i = 0; i < sizeof(T); ++i)
    bytes[i] = static_cast<char>((raw >> (8 * i)) & 0xff);
  return bytes;
}

template <typename T> void append(std::string &out, T value) {
  out += littleEndian(value);
}

void appendString(std::string &out, llvm::StringRef text) {
  append<uint64_t>(out, text.size());
  out.append(text.data(), text.size());
}

} // namespace

#define SPANC_GGUF_SCALAR(NAME, CTYPE, TYPE)                                   \
  GgufWriterValue GgufWriterValue::NAME(CTYPE value) {                         \
    GgufWriterValue result;                                                    \
    result.valueType = GgufValueType::TYPE;                                    \
    result.bytes = littleEndian(value);                                        \
    return result;                                                             \
  }
SPANC_GGUF_SCALAR(u8, uint8_t, UInt8)
SPANC_GGUF_SCALAR(i8, int8_t, Int8)
SPANC_GGUF_SCALAR(u16, uint16_t, UInt16)
SPANC_GGUF_SCALAR(i16, int16_t, Int16)
SPANC_GGUF_SCALAR(u32, uint32_t, UInt32)
SPANC_GGUF_SCALAR(i32, int32_t, Int32)
SPANC_GGUF_SCALAR(u64, uint64_t, UInt64)
SPANC_GGUF_SCALAR(i64, int64_t, Int64)
SPANC_GGUF_SCALAR(f32, float, Float32)
SPANC_GGUF_SCALAR(f64, double, Float64)
#undef SPANC_GGUF_SCALAR

GgufWriterValue GgufWriterValue::boolean(bool value) {
  GgufWriterValue result;
  result.valueType = GgufValueType::Bool;
  result.bytes = std::string(1, value ? '\1' : '\0');
  return result;
}

GgufWriterValue GgufWriterValue::string(llvm::StringRef value) {
  GgufWriterValue result;
  result.valueType = GgufValueType::String;
  result.bytes = value.str();
  return result;
}

GgufWriterValue GgufWriterValue::array(GgufValueType elementType,
                                       std::vector<GgufWriterValue> elements) {
  GgufWriterValue result;
  result.valueType = GgufValueType::Array;
  result.elementType = elementType;
  result.elements = std::move(elements);
  return result;
}

GgufWriterValue GgufWriterValue::fromValue(const GgufValue &value) {
  switch (value.type()) {
  case GgufValueType::UInt8:
    return u8(static_cast<uint8_t>(*value.asUnsigned()));
  case GgufValueType::Int8:
    return i8(static_cast<int8_t>(*value.asSigned()));
  case GgufValueType::UInt16:
    return u16(static_cast<uint16_t>(*value.asUnsigned()));
  case GgufValueType::Int16:
    return i16(static_cast<int16_t>(*value.asSigned()));
  case GgufValueType::UInt32:
    return u32(static_cast<uint32_t>(*value.asUnsigned()));
  case GgufValueType::Int32:
    return i32(static_cast<int32_t>(*value.asSigned()));
  case GgufValueType::UInt64:
    return u64(*value.asUnsigned());
  case GgufValueType::Int64:
    return i64(*value.asSigned());
  case GgufValueType::Float32:
    return f32(static_cast<float>(*value.asFloat()));
  case GgufValueType::Float64:
    return f64(*value.asFloat());
  case GgufValueType::Bool:
    return boolean(*value.asBool());
  case GgufValueType::String:
    return string(*value.asString());
  case GgufValueType::Array: {
    std::vector<GgufWriterValue> elements;
    elements.reserve(value.arraySize());
    for (uint64_t i = 0; i < value.arraySize(); ++i)
      elements.push_back(fromValue(value.element(i)));
    return array(value.elementType(), std::move(elements));
  }
  }
  return GgufWriterValue();
}

void GgufWriterValue::encode(std::string &out) const {
  switch (valueType) {
  case GgufValueType::String:
    appendString(out, bytes);
    return;
  case GgufValueType::Array:
    append<uint32_t>(out, static_cast<uint32_t>(elementType));
    append<uint64_t>(out, elements.size());
    for (const GgufWriterValue &element : elements)
      element.encode(out);
    return;
  default:
    out += bytes;
  }
}

void GgufWriter::add(llvm::StringRef key, GgufWriterValue value) {
  if (key == "general.alignment" && value.type() == GgufValueType::UInt32) {
    std::string encoded;
    value.encode(encoded);
    uint32_t requested = 0;
    for (int i = 3; i >= 0; --i)
      requested = (requested << 8) | static_cast<uint8_t>(encoded[i]);
    if (requested != 0)
      alignment = requested;
  }
  entries.emplace_back(key.str(), std::move(value));
}

void GgufWriter::addString(llvm::StringRef key, llvm::StringRef value) {
  add(key, GgufWriterValue::string(value));
}
void GgufWriter::addUInt32(llvm::StringRef key, uint32_t value) {
  add(key, GgufWriterValue::u32(value));
}
void GgufWriter::addInt32(llvm::StringRef key, int32_t value) {
  add(key, GgufWriterValue::i32(value));
}
void GgufWriter::addFloat32(llvm::StringRef key, float value) {
  add(key, GgufWriterValue::f32(value));
}
void GgufWriter::addBool(llvm::StringRef key, bool value) {
  add(key, GgufWriterValue::boolean(value));
}

void GgufWriter::addStringArray(llvm::StringRef key,
                                llvm::ArrayRef<std::string> values) {
  std::vector<GgufWriterValue> elements;
  elements.reserve(values.size());
  for (const std::string &value : values)
    elements.push_back(GgufWriterValue::string(value));
  add(key, GgufWriterValue::array(GgufValueType::String, std::move(elements)));
}

void GgufWriter::addFloat32Array(llvm::StringRef key,
                                 llvm::ArrayRef<float> values) {
  std::vector<GgufWriterValue> elements;
  for (float value : values)
    elements.push_back(GgufWriterValue::f32(value));
  add(key, GgufWriterValue::array(GgufValueType::Float32, std::move(elements)));
}

void GgufWriter::addInt32Array(llvm::StringRef key,
                               llvm::ArrayRef<int32_t> values) {
  std::vector<GgufWriterValue> elements;
  for (int32_t value : values)
    elements.push_back(GgufWriterValue::i32(value));
  add(key, GgufWriterValue::array(GgufValueType::Int32, std::move(elements)));
}

void GgufWriter::addTensor(llvm::StringRef name, GgmlType type,
                           llvm::ArrayRef<uint64_t> shape,
                           llvm::StringRef data) {
  tensors.push_back({name.str(), type, shape.vec(), data.str()});
}

void GgufWriter::addTensorF32(llvm::StringRef name,
                              llvm::ArrayRef<uint64_t> shape,
                              llvm::ArrayRef<float> values) {
  std::string data(values.size() * sizeof(float), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::memcpy(&data[i * sizeof(float)], littleEndian(values[i]).data(), 4);
  addTensor(name, GgmlType::F32, shape, data);
}

std::string GgufWriter::header(std::vector<uint64_t> &offsets) const {
  std::string out = "GGUF";
  append<uint32_t>(out, version);
  append<uint64_t>(out, tensors.size());
  append<uint64_t>(out, entries.size());
  for (const auto &[key, value] : entries) {
    appendString(out, key);
    append<uint32_t>(out, static_cast<uint32_t>(value.type()));
    value.encode(out);
  }
  uint64_t offset = 0;
  offsets.clear();
  for (const Tensor &tensor : tensors) {
    appendString(out, tensor.name);
    append<uint32_t>(out, static_cast<uint32_t>(tensor.shape.size()));
    for (uint64_t extent : tensor.shape)
      append<uint64_t>(out, extent);
    append<uint32_t>(out, static_cast<uint32_t>(tensor.type));
    append<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset = alignUp(offset + tensor.data.size());
  }
  if (!tensors.empty())
    out.resize(alignUp(out.size()), '\0');
  return out;
}

std::string GgufWriter::write() const {
  std::vector<uint64_t> offsets;
  std::string out = header(offsets);
  if (!tensors.empty()) {
    uint64_t dataStart = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.resize(dataStart + offsets[i], '\0');
      out += tensors[i].data;
    }
    out.resize(dataStart + alignUp(out.size() - dataStart), '\0');
  }
  return out;
}

llvm::Error GgufWriter::writeToFile(llvm::StringRef path) const {
  std::error_code error;
  llvm::raw_fd_ostream stream(path, error, llvm::sys::fs::OF_None);
  if (error)
    return llvm::createStringError(error, "cannot write %s: %s",
                                   path.str().c_str(), error.message().c_str());
  // Streamed tensor by tensor: a multi-gigabyte model (bench/gpu.sh's) is
  // not copied into one string first.
  std::vector<uint64_t> offsets;
  const std::string start = header(offsets);
  stream << start;
  uint64_t written = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    stream.write_zeros(unsigned(offsets[i] - written));
    stream << tensors[i].data;
    written = offsets[i] + tensors[i].data.size();
  }
  if (!tensors.empty())
    stream.write_zeros(unsigned(alignUp(written) - written));
  stream.close();
  if (stream.has_error())
    return llvm::createStringError(stream.error(), "cannot write %s",
                                   path.str().c_str());
  return llvm::Error::success();
}

} // namespace spanc::model
