//===- RagSettings.cpp - The settings of `spanc bench rag` ----------------===//

#include "bench/rag/RagSettings.h"

#include "llvm/ADT/StringRef.h"

namespace spanc::bench {

namespace {

llvm::Expected<std::vector<kv::RelocationMode>>
parseRelocations(llvm::StringRef text) {
  std::vector<kv::RelocationMode> modes;
  llvm::SmallVector<llvm::StringRef, 2> names;
  text.split(names, ',', -1, false);
  for (llvm::StringRef name : names) {
    if (name.trim() == "rope-in-kernel")
      modes.push_back(kv::RelocationMode::RopeInKernel);
    else if (name.trim() == "rerope")
      modes.push_back(kv::RelocationMode::Rerope);
    else
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--set relocations=%s: expected rope-in-kernel and/or rerope",
          text.str().c_str());
  }
  if (modes.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set relocations=: name at least one");
  return modes;
}

llvm::Error settingError(const char *message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The ranges of the settings readRagSettings read.
llvm::Error checkRagSettings(const RagSettings &settings) {
  for (int64_t docs : settings.documentCounts)
    if (docs < 1 || docs > 64)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--set docs: %lld is not in 1..64",
                                     (long long)docs);
  if (settings.documentTokens < 16 || settings.documentTokens > 4096)
    return settingError("--set doc-tokens: expected 16..4096");
  for (int64_t value : settings.repetitionList)
    if (value < 1)
      return settingError("--set reps: repetitions must be >= 1");
  for (int64_t value : settings.peerRepetitionList)
    if (value < 0)
      return settingError("--set peer-reps: repetitions must be >= 0");
  return llvm::Error::success();
}

} // namespace

/// Reads every setting first (so a typo fails before the model loads),
/// then checks their ranges.
llvm::Expected<RagSettings> readRagSettings(const BenchArgs &args) {
  RagSettings settings;
  auto readList = [&](const char *key, llvm::ArrayRef<int64_t> quick,
                      llvm::ArrayRef<int64_t> full,
                      std::vector<int64_t> &target) -> llvm::Error {
    auto value = args.intListSetting(key, args.quick ? quick : full);
    if (!value)
      return value.takeError();
    target = std::move(*value);
    return llvm::Error::success();
  };
  auto readInt = [&](const char *key, int64_t fallback,
                     int64_t &target) -> llvm::Error {
    auto value = args.intSetting(key, fallback);
    if (!value)
      return value.takeError();
    target = *value;
    return llvm::Error::success();
  };
  if (auto error =
          readList("docs", {1, 4}, {1, 2, 4, 8, 15}, settings.documentCounts))
    return error;
  if (auto error = readInt("doc-tokens", args.quick ? 128 : 512,
                           settings.documentTokens))
    return error;
  if (auto error = readList("reps", {1}, {10}, settings.repetitionList))
    return error;
  if (auto error = readList("peer-reps", {1}, {3, 3, 3, 2, 1},
                            settings.peerRepetitionList))
    return error;
  if (auto error =
          readInt("budget-s", args.quick ? 0 : 1200, settings.budgetSeconds))
    return error;
  if (auto error = readInt("cache-tokens", 20480, settings.cacheTokens))
    return error;
  if (auto error = readInt("step-tokens", 512, settings.stepTokens))
    return error;
  auto relocations = parseRelocations(args.setting(
      "relocations", args.quick ? "rope-in-kernel,rerope" : "rope-in-kernel"));
  if (!relocations)
    return relocations.takeError();
  settings.relocations = std::move(*relocations);
  std::string text = args.setting(
      "modes", "prefix,isolated,prefix+recompute1,isolated+recompute1");
  llvm::SmallVector<llvm::StringRef, 4> names;
  if (text != "none")
    llvm::StringRef(text).split(names, ',', -1, false);
  for (llvm::StringRef name : names) {
    auto mode = kv::parseSpanMode(name.trim());
    if (!mode)
      return mode.takeError();
    settings.spanModes.push_back(*mode);
  }
  settings.peer = args.setting("peer", "auto");
  if (settings.peer != "auto" && settings.peer != "on" &&
      settings.peer != "off")
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set peer=%s: expected auto, on or off",
                                   settings.peer.c_str());
  settings.repetitionsOverride = args.repetitions;
  if (auto error = checkRagSettings(settings))
    return error;
  return settings;
}

} // namespace spanc::bench
