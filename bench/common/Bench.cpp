//===- Bench.cpp - Benchmark registry and common arguments ----------------===//

#include "bench/common/Bench.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

namespace spanc::bench {

namespace {

std::map<std::string, BenchInfo> &registry() {
  static std::map<std::string, BenchInfo> benchmarks;
  return benchmarks;
}

llvm::Expected<int64_t> parseInteger(llvm::StringRef key,
                                     llvm::StringRef text) {
  int64_t value = 0;
  if (text.trim().getAsInteger(10, value))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set %s=%s: expected an integer",
                                   key.str().c_str(), text.str().c_str());
  return value;
}

} // namespace

BenchRegistration::BenchRegistration(BenchInfo info) {
  std::string name = info.name;
  registry().emplace(std::move(name), std::move(info));
}

const std::map<std::string, BenchInfo> &registeredBenchmarks() {
  return registry();
}

std::string BenchArgs::setting(llvm::StringRef key,
                               llvm::StringRef fallback) const {
  auto found = settings.find(key.str());
  return found == settings.end() ? fallback.str() : found->second;
}

llvm::Expected<int64_t> BenchArgs::intSetting(llvm::StringRef key,
                                              int64_t fallback) const {
  auto found = settings.find(key.str());
  if (found == settings.end())
    return fallback;
  return parseInteger(key, found->second);
}

llvm::Expected<std::vector<int64_t>>
BenchArgs::intListSetting(llvm::StringRef key,
                          llvm::ArrayRef<int64_t> fallback) const {
  auto found = settings.find(key.str());
  if (found == settings.end())
    return std::vector<int64_t>(fallback.begin(), fallback.end());
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::StringRef(found->second).split(parts, ',', -1, false);
  if (parts.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set %s=: expected a list of integers",
                                   key.str().c_str());
  std::vector<int64_t> values;
  for (llvm::StringRef part : parts) {
    llvm::Expected<int64_t> value = parseInteger(key, part);
    if (!value)
      return value.takeError();
    values.push_back(*value);
  }
  return values;
}

int BenchArgs::repetitionsOr(int fullDefault, int quickDefault) const {
  if (repetitions > 0)
    return repetitions;
  return quick ? quickDefault : fullDefault;
}

} // namespace spanc::bench
