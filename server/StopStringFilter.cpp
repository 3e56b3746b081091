//===- StopStringFilter.cpp - Text released to a client, stop strings cut -===//

#include "server/StopStringFilter.h"

#include <algorithm>

namespace spanc::server {

namespace {

/// The length of `text`'s longest prefix that does not end inside a UTF-8
/// character (an incomplete last sequence is held back).
size_t completeUtf8Prefix(llvm::StringRef text) {
  size_t end = text.size();
  // A sequence is at most 4 bytes: look back over continuation bytes.
  for (size_t back = 1; back <= 4 && back <= end; ++back) {
    unsigned char byte = static_cast<unsigned char>(text[end - back]);
    if ((byte & 0xC0) == 0x80)
      continue; // a continuation byte
    size_t length = byte < 0x80             ? 1
                    : (byte & 0xE0) == 0xC0 ? 2
                    : (byte & 0xF0) == 0xE0 ? 3
                    : (byte & 0xF8) == 0xF0 ? 4
                                            : 1; // invalid: let it pass
    return length > back ? end - back : end;
  }
  return end;
}

} // namespace

StopStringFilter::StopStringFilter(std::vector<std::string> stopStrings)
    : stops(std::move(stopStrings)) {
  stops.erase(std::remove(stops.begin(), stops.end(), std::string()),
              stops.end());
}

std::string StopStringFilter::push(llvm::StringRef piece) {
  if (hitStop)
    return "";
  held += piece.str();
  size_t first = std::string::npos;
  for (const std::string &stop : stops)
    first = std::min(first, held.find(stop));
  if (first != std::string::npos) {
    hitStop = true;
    std::string released = held.substr(0, first);
    held.clear();
    return released;
  }
  // Hold back the longest end of the text that begins a stop string.
  size_t keep = 0;
  for (const std::string &stop : stops)
    for (size_t length = std::min(stop.size() - 1, held.size()); length > keep;
         --length)
      if (llvm::StringRef(held).endswith(
              llvm::StringRef(stop).take_front(length))) {
        keep = length;
        break;
      }
  size_t release = completeUtf8Prefix(llvm::StringRef(held).drop_back(keep));
  std::string released = held.substr(0, release);
  held.erase(0, release);
  return released;
}

std::string StopStringFilter::finish() {
  std::string rest;
  rest.swap(held);
  return rest;
}

} // namespace spanc::server
