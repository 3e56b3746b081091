//===- Utf8.cpp - UTF-8 as the tokenizers read it -------------------------===//

#include "runtime/model/Utf8.h"

namespace spanc::model {

void appendUtf8(std::string &out, uint32_t codePoint) {
  if (codePoint < 0x80) {
    out += static_cast<char>(codePoint);
  } else if (codePoint < 0x800) {
    out += static_cast<char>(0xc0 | (codePoint >> 6));
    out += static_cast<char>(0x80 | (codePoint & 0x3f));
  } else if (codePoint < 0x10000) {
    out += static_cast<char>(0xe0 | (codePoint >> 12));
    out += static_cast<char>(0x80 | ((codePoint >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (codePoint & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (codePoint >> 18));
    out += static_cast<char>(0x80 | ((codePoint >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((codePoint >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (codePoint & 0x3f));
  }
}

size_t utf8Length(unsigned char lead) {
  if (lead < 0x80 || lead < 0xc0)
    return 1;
  if (lead < 0xe0)
    return 2;
  if (lead < 0xf0)
    return 3;
  return 4;
}

bool decodeUtf8(llvm::StringRef text, size_t &offset, uint32_t &codePoint) {
  unsigned char lead = text[offset];
  size_t length;
  if (lead < 0x80) {
    codePoint = lead;
    ++offset;
    return true;
  }
  if ((lead & 0xe0) == 0xc0) {
    length = 2;
    codePoint = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3;
    codePoint = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4;
    codePoint = lead & 0x07;
  } else {
    ++offset;
    return false;
  }
  if (offset + length > text.size()) {
    ++offset;
    return false;
  }
  for (size_t i = 1; i < length; ++i) {
    unsigned char next = text[offset + i];
    if ((next & 0xc0) != 0x80) {
      ++offset;
      return false;
    }
    codePoint = (codePoint << 6) | (next & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF would make PCRE2
  // reject the subject; treat them as invalid too.
  static const uint32_t minimum[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (codePoint < minimum[length] || codePoint > 0x10ffff ||
      (codePoint >= 0xd800 && codePoint <= 0xdfff)) {
    ++offset;
    return false;
  }
  offset += length;
  return true;
}

std::string sanitizeUtf8(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    size_t start = offset;
    uint32_t codePoint;
    if (decodeUtf8(text, offset, codePoint))
      out.append(text.data() + start, offset - start);
    else
      appendUtf8(out, 0xfffd);
  }
  return out;
}

} // namespace spanc::model
