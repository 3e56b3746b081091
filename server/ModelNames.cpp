//===- ModelNames.cpp - The names requests may give the one model served --===//

#include "server/ModelNames.h"

#include "llvm/ADT/SmallVector.h"

namespace spanc::server {

namespace {

/// The spelling two names are compared in: lower case, without one
/// trailing ".gguf" (itself in any case).
std::string matchKey(llvm::StringRef name) {
  std::string key = name.lower();
  if (llvm::StringRef(key).endswith(".gguf"))
    key.resize(key.size() - 5);
  return key;
}

} // namespace

ModelNames::ModelNames(llvm::ArrayRef<std::string> given) {
  for (const std::string &name : given) {
    const std::string key = matchKey(name);
    bool seen = false;
    for (const std::string &kept : names)
      seen = seen || matchKey(kept) == key;
    if (!seen)
      names.push_back(name);
  }
}

llvm::Expected<ModelNames>
ModelNames::fromFlags(llvm::ArrayRef<std::string> flags,
                      llvm::StringRef fallback) {
  std::vector<std::string> names;
  for (const std::string &flag : flags) {
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(flag).split(parts, ',');
    for (llvm::StringRef part : parts) {
      part = part.trim();
      if (part.empty())
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "--served-model-name '" + flag +
                "': a name is empty (give names separated by commas)");
      names.push_back(part.str());
    }
  }
  if (names.empty())
    names.push_back(fallback.str());
  return ModelNames(names);
}

const std::string &ModelNames::primary() const {
  static const std::string none;
  return names.empty() ? none : names.front();
}

const std::string *ModelNames::match(const std::string &requested) const {
  if (names.empty())
    return &requested;
  const std::string key = matchKey(requested);
  for (const std::string &name : names)
    if (matchKey(name) == key)
      return &name;
  return nullptr;
}

std::string ModelNames::describe() const {
  std::string text;
  for (const std::string &name : names)
    text += (text.empty() ? "'" : ", '") + name + "'";
  return text;
}

} // namespace spanc::server
