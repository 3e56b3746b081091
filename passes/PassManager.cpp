//===- PassManager.cpp - Registered passes and the pipeline that runs them ===//

#include "passes/PassManager.h"

#include "ir/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>

namespace spanc::passes {

namespace {
/// Function-local, so registrations from other files' static initializers
/// find it constructed whatever the initialization order.
llvm::StringMap<PassInfo> &registry() {
  static llvm::StringMap<PassInfo> passes;
  return passes;
}
} // namespace

PassRegistration::PassRegistration(llvm::StringRef name,
                                   llvm::StringRef description,
                                   PassFactory factory) {
  registry()[name] = PassInfo{name.str(), description.str(), factory};
}

const PassInfo *lookupPass(llvm::StringRef name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<const PassInfo *> registeredPasses() {
  std::vector<const PassInfo *> result;
  for (const auto &entry : registry())
    result.push_back(&entry.second);
  llvm::sort(result, [](const PassInfo *a, const PassInfo *b) {
    return a->name < b->name;
  });
  return result;
}

llvm::ArrayRef<const char *> defaultPipeline() {
  // The order of docs/ARCHITECTURE.md, "Compilation": remove sugar, normalize
  // joins, restructure wide calls, line inner outputs up with their inputs,
  // share identical work, then order the bulk.
  static const char *const pipeline[] = {
      "desugar-chat",    "desugar-retrieve", "plus-simplify", "tree-reduce",
      "plus-distribute", "plus-simplify",    "cse",           "bulk-order",
  };
  return pipeline;
}

std::string describePasses() {
  std::string text = "Default pipeline (spanc opt without --passes; "
                     "spanc compile --emit=ir-opt):\n ";
  for (const char *name : defaultPipeline())
    text += std::string(" ") + name;
  text += "\n\nPasses:\n";
  std::vector<const PassInfo *> passes = registeredPasses();
  if (passes.empty())
    text += "  (none registered yet)\n";
  for (const PassInfo *info : passes) {
    std::string name = "  " + info->name;
    name.resize(std::max<size_t>(name.size() + 1, 22), ' ');
    text += name + info->description + "\n";
  }
  return text;
}

llvm::Error PassManager::addPipeline(llvm::StringRef commaSeparated) {
  llvm::SmallVector<llvm::StringRef, 8> names;
  commaSeparated.split(names, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (llvm::StringRef name : names) {
    name = name.trim();
    if (name.empty())
      continue;
    const PassInfo *info = lookupPass(name);
    if (!info) {
      std::string known;
      for (const PassInfo *registered : registeredPasses())
        known += (known.empty() ? "" : ", ") + registered->name;
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "unknown pass '%s' (registered: %s)",
          name.str().c_str(), known.empty() ? "none" : known.c_str());
    }
    addPass(name, info->factory());
  }
  return llvm::Error::success();
}

void PassManager::addDefaultPipeline(llvm::ArrayRef<std::string> skip) {
  for (const char *name : defaultPipeline()) {
    if (llvm::is_contained(skip, name))
      continue;
    const PassInfo *info = lookupPass(name);
    // A build mistake, not an input: skipping the pass would compile every
    // program without it, silently.
    if (!info)
      llvm::report_fatal_error(llvm::Twine("pass '") + name +
                               "' of the default pipeline is not linked: "
                               "depend on //passes:all");
    addPass(name, info->factory());
  }
}

void PassManager::addPass(llvm::StringRef name, std::unique_ptr<Pass> pass) {
  passes.emplace_back(name.str(), std::move(pass));
}

std::vector<std::string> PassManager::getPassNames() const {
  std::vector<std::string> names;
  for (const auto &entry : passes)
    names.push_back(entry.first);
  return names;
}

llvm::Error PassManager::addPrintAfter(llvm::StringRef passName) {
  if (!lookupPass(passName))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--print-ir-after: unknown pass '%s'",
                                   passName.str().c_str());
  printAfter.insert(passName);
  return llvm::Error::success();
}

llvm::Error PassManager::run(ir::Module &module) {
  std::string statistics;
  context.takeRewrites();
  for (auto &[name, pass] : passes) {
    if (!pass->run(module, context))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "pass '%s' failed", name.c_str());
    if (std::optional<size_t> rewrites = context.takeRewrites())
      statistics += "  " + name + ": " + std::to_string(*rewrites) +
                    (*rewrites == 1 ? " rewrite\n" : " rewrites\n");
    if (printAfterAll || printAfter.count(name)) {
      *printStream << "// -----// IR Dump After " << name << " //----- //\n";
      ir::printModule(module, *printStream, printOptions);
      printStream->flush();
    }
    // A pass that breaks the IR is a bug in that pass: say which one.
    if (verifyEach && !ir::verify(module, context.getDiagnostics()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the IR is ill-formed after pass '%s'",
                                     name.c_str());
  }
  if (!verifyEach && !passes.empty() &&
      !ir::verify(module, context.getDiagnostics()))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the IR is ill-formed after the pipeline (last pass '%s'; verify "
        "after each pass to find the one that broke it)",
        passes.back().first.c_str());
  if (printStatistics) {
    *printStream << "// -----// Pass statistics //----- //\n"
                 << (statistics.empty() ? "  (no pass counts rewrites)\n"
                                        : statistics);
    printStream->flush();
  }
  return llvm::Error::success();
}

} // namespace spanc::passes
