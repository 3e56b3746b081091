//===- JsonSource.cpp - A JSON document read from a buffer, located -------===//

#include "frontend/JsonSource.h"

#include "support/JsonDepth.h"
#include "support/JsonSax.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <vector>

namespace spanc::frontend {

namespace {

/// Ignores every SAX event but the error, whose position it records.
struct ErrorLocator : support::AcceptingJsonSax<Json> {
  size_t offset = 0;
  bool parse_error(size_t position, const std::string &lastToken,
                   const nlohmann::detail::exception &) override {
    // `position` counts the bytes read, the offending token included.
    offset = position >= lastToken.size() ? position - lastToken.size() : 0;
    return false;
  }
};

/// The offset of the token that made Json::parse throw (0 if unknown).
size_t locateFailure(llvm::StringRef text) {
  ErrorLocator locator;
  try {
    Json::sax_parse(text.begin(), text.end(), &locator);
  } catch (const Json::exception &) {
  }
  return std::min(locator.offset, text.size());
}

std::string cleanMessage(llvm::StringRef message) {
  // "[json.exception.parse_error.101] parse error at line 1, column 2:
  // syntax error ..." -> keep what follows the position;
  // "[json.exception.out_of_range.406] number overflow ..." -> drop the tag
  // (the diagnostic gives the position itself).
  if (!message.startswith("[json.exception"))
    return message.str();
  size_t colon = message.find(": ");
  if (colon != llvm::StringRef::npos)
    return message.substr(colon + 2).str();
  size_t tagEnd = message.find("] ");
  if (tagEnd != llvm::StringRef::npos)
    return message.substr(tagEnd + 2).str();
  return message.str();
}

} // namespace

const char *describeJsonKind(const Json &value) {
  switch (value.type()) {
  case Json::value_t::null:
    return "null";
  case Json::value_t::boolean:
    return "a boolean";
  case Json::value_t::string:
    return "a string";
  case Json::value_t::array:
    return "an array";
  case Json::value_t::object:
    return "an object";
  case Json::value_t::number_integer:
  case Json::value_t::number_unsigned:
    return "an integer";
  case Json::value_t::number_float:
    return "a number";
  default:
    return "a value";
  }
}

/// A JSON Pointer segment: '~' and '/' escaped as RFC 6901 says.
std::string pointerSegment(llvm::StringRef key) {
  std::string result;
  for (char c : key) {
    if (c == '~')
      result += "~0";
    else if (c == '/')
      result += "~1";
    else
      result += c;
  }
  return result;
}

std::unique_ptr<JsonSource>
JsonSource::parse(unsigned bufferId, ir::DiagnosticEngine &diagnostics) {
  std::unique_ptr<JsonSource> source(new JsonSource(bufferId, diagnostics));
  if (!source->read())
    return nullptr;
  return source;
}

JsonSource::JsonSource(unsigned bufferId, ir::DiagnosticEngine &diagnostics)
    : diagnostics(diagnostics),
      buffer(diagnostics.getSourceMgr().getMemoryBuffer(bufferId)) {}

llvm::SMLoc JsonSource::at(size_t offset) const {
  return llvm::SMLoc::getFromPointer(buffer->getBufferStart() + offset);
}

bool JsonSource::read() {
  llvm::StringRef text = buffer->getBuffer();
  // Before anything is built: what follows is linear in the size of the
  // text only within the depth limit.
  if (std::optional<size_t> tooDeep = support::findJsonDepthExcess(text)) {
    diagnostics.emit(at(*tooDeep), llvm::SourceMgr::DK_Error,
                     "invalid JSON: nesting deeper than " +
                         llvm::Twine(support::kMaxJsonDepth) +
                         " levels is not supported");
    return false;
  }
  try {
    document = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error &error) {
    // `byte` is 1-based and may point one past the end.
    size_t offset = error.byte ? error.byte - 1 : 0;
    diagnostics.emit(at(std::min(offset, text.size())),
                     llvm::SourceMgr::DK_Error,
                     "invalid JSON: " + cleanMessage(error.what()));
    return false;
  } catch (const Json::exception &error) {
    // Other failures while building the document (a number that does not
    // fit a double, "1e400", is out_of_range.406) carry no position; a SAX
    // pass that only listens for the error finds the offending token.
    diagnostics.emit(at(locateFailure(text)), llvm::SourceMgr::DK_Error,
                     "invalid JSON: " + cleanMessage(error.what()));
    return false;
  }
  // The parser keeps the last of two equal keys; the first value would
  // be dropped without a word.
  if (reportDuplicateKeys(text))
    return false;
  locateNodes(text);
  return true;
}

/// Reports every key that its object already has, at the key, with its
/// JSON Pointer; returns whether there was one. `text` parsed, so it is
/// well formed and a small state machine follows it: in an object, the
/// string after '{' or ',' is a key.
bool JsonSource::reportDuplicateKeys(llvm::StringRef text) {
  struct Container {
    bool isObject;
    bool expectingKey;
    std::string child; ///< the pointer segment of the current child
    unsigned index = 0;
    llvm::StringSet<> keys;
  };
  // The parser stops at a NUL byte: what follows was never read, need not
  // be JSON, and is not scanned.
  text = text.take_until([](char c) { return c == '\0'; });
  std::vector<Container> stack;
  bool found = false;
  // Built only for a report: a pointer kept per container would make the
  // scan quadratic in the depth.
  auto childPath = [&] {
    std::string path;
    for (const Container &container : stack)
      path += "/" + container.child;
    return path;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = i++;
      bool escaped = false;
      for (; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') {
          escaped = true;
          ++i;
        }
      // An unterminated string (never in text the parser accepted; kept
      // safe all the same).
      if (i >= text.size())
        break;
      if (stack.empty() || !stack.back().expectingKey)
        continue;
      Container &object = stack.back();
      object.expectingKey = false;
      llvm::StringRef quoted = text.slice(start, i + 1);
      // Decoded without exceptions: the scan may run over a key the full
      // parse rejects (a raw control character); it is compared raw.
      std::string key = quoted.drop_front().drop_back().str();
      if (escaped) {
        Json decoded = Json::parse(quoted.begin(), quoted.end(), nullptr,
                                   /*allow_exceptions=*/false);
        if (decoded.is_string())
          key = decoded.get<std::string>();
      }
      object.child = pointerSegment(key);
      if (!object.keys.insert(key).second) {
        diagnostics.emit(at(start), llvm::SourceMgr::DK_Error,
                         "duplicate key '" + key +
                             "': a JSON reader keeps only its last value "
                             "(at " +
                             childPath() + ")");
        found = true;
      }
    } else if (c == '{' || c == '[') {
      stack.push_back({c == '{', c == '{', "0", 0, {}});
    } else if (c == '}' || c == ']') {
      // The parser stops at a NUL byte, so bytes after one were never
      // checked: never trust the text to balance.
      if (!stack.empty())
        stack.pop_back();
    } else if (c == ',' && !stack.empty()) {
      Container &container = stack.back();
      if (container.isObject)
        container.expectingKey = true;
      else
        container.child = std::to_string(++container.index);
    }
  }
  return found;
}

/// Records the offset of each object and array: the n-th '{' outside
/// strings is the n-th object of a pre-order walk.
void JsonSource::locateNodes(llvm::StringRef text) {
  std::vector<uint32_t> objectOffsets, arrayOffsets;
  support::forEachJsonBracket(text, [&](size_t offset, char bracket) {
    if (bracket == '{')
      objectOffsets.push_back(static_cast<uint32_t>(offset));
    else if (bracket == '[')
      arrayOffsets.push_back(static_cast<uint32_t>(offset));
    return true;
  });
  size_t nextObject = 0, nextArray = 0;
  // Iterative pre-order walk (children pushed in reverse).
  std::vector<const Json *> stack = {&document};
  while (!stack.empty()) {
    const Json *node = stack.back();
    stack.pop_back();
    if (node->is_object() && nextObject < objectOffsets.size())
      offsets[node] = objectOffsets[nextObject++];
    else if (node->is_array() && nextArray < arrayOffsets.size())
      offsets[node] = arrayOffsets[nextArray++];
    if (node->is_structured()) {
      std::vector<const Json *> children;
      for (const Json &child : *node)
        children.push_back(&child);
      stack.insert(stack.end(), children.rbegin(), children.rend());
    }
  }
}

ir::Location JsonSource::locate(const Json &node) const {
  auto it = offsets.find(&node);
  return diagnostics.getLocation(at(it == offsets.end() ? 0 : it->second));
}

} // namespace spanc::frontend
