//===- JsonDepth.cpp - The nesting limit of every JSON document spanc reads ==//

#include "support/JsonDepth.h"

#include "support/JsonSax.h"

#include <nlohmann/json.hpp>

#include <string>

namespace spanc::support {

namespace {

using Json = nlohmann::json;

/// Counts open objects and arrays and stops the parser at the first one
/// past the limit; every other event is accepted and dropped.
struct DepthCounter : AcceptingJsonSax<Json> {
  explicit DepthCounter(unsigned maxDepth) : maxDepth(maxDepth) {}

  unsigned maxDepth;
  unsigned depth = 0;
  bool exceeded = false;

  bool open() {
    if (++depth <= maxDepth)
      return true;
    exceeded = true;
    return false;
  }
  bool start_object(size_t) override { return open(); }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(size_t) override { return open(); }
  bool end_array() override {
    --depth;
    return true;
  }
};

} // namespace

std::optional<size_t> findJsonDepthExcess(llvm::StringRef text,
                                          unsigned maxDepth) {
  DepthCounter counter(maxDepth);
  try {
    Json::sax_parse(text.begin(), text.end(), &counter);
  } catch (const Json::exception &) {
    // Only parse_error throws here, and it returns false instead.
  }
  if (!counter.exceeded)
    return std::nullopt;
  // The parser accepted every byte up to the bracket past the limit, so a
  // scan that skips strings meets the same brackets in the same order.
  unsigned depth = 0;
  size_t excess = text.size();
  forEachJsonBracket(text, [&](size_t offset, char bracket) {
    if (bracket == '{' || bracket == '[') {
      if (++depth > maxDepth) {
        excess = offset;
        return false;
      }
    } else {
      --depth;
    }
    return true;
  });
  return excess;
}

void forEachJsonBracket(llvm::StringRef text,
                        llvm::function_ref<bool(size_t, char)> visit) {
  bool inString = false;
  for (size_t index = 0; index < text.size(); ++index) {
    char c = text[index];
    if (inString) {
      if (c == '\\')
        ++index;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '}' || c == '[' || c == ']') {
      if (!visit(index, c))
        return;
    }
  }
}

std::string jsonLineAndColumn(llvm::StringRef text, size_t offset) {
  llvm::StringRef before = text.take_front(offset);
  size_t line = 1 + before.count('\n');
  size_t lineStart = before.rfind('\n');
  size_t column =
      lineStart == llvm::StringRef::npos ? offset + 1 : offset - lineStart;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

} // namespace spanc::support
