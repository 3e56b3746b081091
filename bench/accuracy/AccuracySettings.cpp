//===- AccuracySettings.cpp - `spanc bench accuracy`'s settings ----------===//

#include "bench/accuracy/AccuracySettings.h"
#include "bench/accuracy/AccuracyTasks.h"
#include "bench/common/Names.h"

#include "llvm/ADT/SmallVector.h"

#include <tuple>

namespace spanc::bench {
namespace {

/// "full", "isolated", "prefix", "isolated+recompute2", ...
llvm::Expected<Mode> parseMode(llvm::StringRef text) {
  Mode mode;
  mode.name = text.str();
  if (text == "full") {
    mode.full = true;
    return mode;
  }
  auto span = kv::parseSpanMode(text);
  if (!span)
    return failure("modes: " + llvm::toString(span.takeError()) + " (or full)");
  mode.span = *span;
  return mode;
}

/// The modes of `--set modes=...`, full first (every other mode is
/// compared with it, so it is added when left out).
llvm::Expected<std::vector<Mode>> parseModes(llvm::StringRef text) {
  std::vector<Mode> modes;
  llvm::SmallVector<llvm::StringRef, 8> names;
  text.split(names, ',', -1, false);
  for (llvm::StringRef name : names) {
    auto mode = parseMode(name.trim());
    if (!mode)
      return mode.takeError();
    if (llvm::any_of(modes,
                     [&](const Mode &m) { return m.name == mode->name; }))
      continue;
    modes.push_back(*mode);
  }
  if (!llvm::any_of(modes, [](const Mode &m) { return m.full; }))
    modes.insert(modes.begin(), *parseMode("full"));
  std::stable_partition(modes.begin(), modes.end(),
                        [](const Mode &m) { return m.full; });
  return modes;
}

/// `task=...`: known names, each once, at least one.
llvm::Expected<std::vector<std::string>> parseTasks(const BenchArgs &args) {
  std::vector<std::string> tasks;
  // The setting outlives the names split from it.
  const std::string setting = args.setting("task", "codes,prose,multihop");
  llvm::SmallVector<llvm::StringRef, 3> names;
  llvm::StringRef(setting).split(names, ',', -1, false);
  for (llvm::StringRef name : names) {
    if (!isTask(name.trim()))
      return failure("task: expected codes, prose and/or multihop, got '" +
                     name + "'");
    if (!llvm::is_contained(tasks, name.trim().str()))
      tasks.push_back(name.trim().str());
  }
  if (tasks.empty())
    return failure("task: name at least one of codes, prose, multihop");
  return tasks;
}

/// The ranges of the settings readAccuracySettings read.
llvm::Error checkAccuracySettings(const AccuracySettings &settings) {
  for (int64_t docs : settings.docCounts)
    if (docs < 1 || docs > int64_t(maxDistinctNames()))
      return failure("docs: each count must be in 1.." +
                     llvm::Twine(maxDistinctNames()) + ", got " +
                     llvm::Twine(docs));
  for (int64_t tokens : settings.docTokenList)
    if (tokens < 16 || tokens > 1024)
      return failure("doc_tokens: each length must be in 16..1024");
  for (int64_t contexts : settings.contextList)
    if (contexts < 1)
      return failure("contexts: each count must be >= 1");
  if (settings.maxTokens < 1 || settings.proseMaxTokens < 1 ||
      settings.groupSize < 1 || settings.stepTokens < 64 ||
      settings.recompute < 1 || settings.proseContexts < 1)
    return failure("max_tokens, prose_max_tokens, group, recompute and "
                   "prose_contexts must be "
                   ">= 1, step_tokens >= 64");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<AccuracySettings> readAccuracySettings(const BenchArgs &args) {
  AccuracySettings settings;
  for (auto [key, target, quick, full] :
       {std::make_tuple("docs", &settings.docCounts, std::vector<int64_t>{4},
                        std::vector<int64_t>{4, 8, 16}),
        std::make_tuple("doc_tokens", &settings.docTokenList,
                        std::vector<int64_t>{32},
                        std::vector<int64_t>{32, 256}),
        std::make_tuple("contexts", &settings.contextList,
                        std::vector<int64_t>{4},
                        std::vector<int64_t>{40, 12})}) {
    auto value = args.intListSetting(key, args.quick ? quick : full);
    if (!value)
      return value.takeError();
    *target = std::move(*value);
  }
  for (auto [key, target, fallback] :
       {std::make_tuple("prose_contexts", &settings.proseContexts,
                        int64_t(args.quick ? 4 : 24)),
        std::make_tuple("max_tokens", &settings.maxTokens, int64_t(16)),
        std::make_tuple("prose_max_tokens", &settings.proseMaxTokens,
                        int64_t(32)),
        std::make_tuple("group", &settings.groupSize, int64_t(20)),
        std::make_tuple("step_tokens", &settings.stepTokens, int64_t(2048)),
        std::make_tuple("recompute", &settings.recompute, int64_t(1))}) {
    auto value = args.intSetting(key, fallback);
    if (!value)
      return value.takeError();
    *target = *value;
  }
  std::string recompute = std::to_string(settings.recompute);
  std::string recomputeSuffix = "+recompute" + recompute;
  auto modes = parseModes(args.setting(
      "modes", "full,isolated,prefix,isolated" + recomputeSuffix + ",prefix" +
                   recomputeSuffix + ",prefix+end" + recompute + ",prefix" +
                   recomputeSuffix + "+end" + recompute));
  if (!modes)
    return modes.takeError();
  settings.modes = std::move(*modes);
  auto tasks = parseTasks(args);
  if (!tasks)
    return tasks.takeError();
  settings.tasks = std::move(*tasks);
  settings.repetitionsOverride = args.repetitions;
  if (llvm::Error error = checkAccuracySettings(settings))
    return error;
  return settings;
}

} // namespace spanc::bench
