//===- PassManager.h - Registered passes and the pipeline that runs them --===//
//
// A pass is one file under passes/ with a factory `createXPass()` and a
// static registration:
//
//   static spanc::passes::PassRegistration registration(
//       "plus-simplify", "flatten nested joins, drop empty spans, unwrap "
//       "singletons", createPlusSimplifyPass);
//
// (its cc_library needs `alwayslink = True` and a place in the deps of
// //passes:all, so that the registration is linked into spanc). The manager
// runs a list of passes, verifies the IR after each one, prints it when
// asked (--print-ir-after-all, --print-ir-after=NAME) and, with --stats, the
// rewrites each pass on the rewrite driver made (RewriteDriver.h).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PASSES_PASSMANAGER_H
#define SPANC_PASSES_PASSMANAGER_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"
#include "ir/Printer.h"
#include "retrieval/CorpusIndex.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spanc::retrieval {
class CorpusCatalog;
} // namespace spanc::retrieval

namespace spanc::passes {

/// Options the command line hands to passes.
struct PassOptions {
  /// --tree-reduce=k: the fan-in for tree-reduce where a gen has no
  /// `reduce` attribute (0: only gens with `reduce` are reduced).
  unsigned treeReduce = 0;
  /// --prepare-fragments: desugar-retrieve adds G¹ warm-up calls.
  bool prepareFragments = false;
  /// desugar-retrieve: where a corpus folder may lie (corpusIndex's read
  /// policy: the program's folder and --allow-read; the default allows
  /// none), how large its files may be and where its index is kept
  /// (--index-dir).
  retrieval::IndexOptions corpusIndex;
  /// spanc serve --corpus NAME=DIR: set for a program from the network. A
  /// retrieve's corpus must then be one of these names, and no folder is
  /// read besides them (a corpus the server was not given is refused,
  /// naming it).
  const retrieval::CorpusCatalog *corpora = nullptr;
  /// desugar-retrieve asks this between corpus files while indexing; true
  /// stops the pass with an error (an interrupt: spanc leaves the index as
  /// it was).
  std::function<bool()> stopRequested;
};

/// What a pass gets besides the module: options and a place for located
/// errors.
class PassContext {
public:
  PassContext(ir::DiagnosticEngine &diagnostics, const PassOptions &options)
      : diagnostics(diagnostics), options(options) {}

  ir::DiagnosticEngine &getDiagnostics() { return diagnostics; }
  const PassOptions &getOptions() const { return options; }

  /// Counts rewrites of the pass that runs (applyPatternsGreedily's);
  /// the manager reads them after the pass (--stats).
  void addRewrites(size_t count) {
    numRewrites = numRewrites.value_or(0) + count;
  }
  /// The rewrites counted since the last call; nothing when the pass
  /// counted none (it does not use the rewrite driver).
  std::optional<size_t> takeRewrites() {
    return std::exchange(numRewrites, {});
  }

private:
  ir::DiagnosticEngine &diagnostics;
  const PassOptions &options;
  std::optional<size_t> numRewrites;
};

class Pass {
public:
  virtual ~Pass() = default;
  /// Rewrites `module` in place. Returns false after reporting what went
  /// wrong through context.getDiagnostics() (at an op's location when
  /// there is one).
  virtual bool run(ir::Module &module, PassContext &context) = 0;
};

using PassFactory = std::function<std::unique_ptr<Pass>()>;

struct PassInfo {
  std::string name;
  std::string description;
  PassFactory factory;
};

/// Registers a pass when its object file is loaded (file-scope static).
struct PassRegistration {
  PassRegistration(llvm::StringRef name, llvm::StringRef description,
                   PassFactory factory);
};

/// The registered pass called `name`, or null.
const PassInfo *lookupPass(llvm::StringRef name);
/// All registered passes, sorted by name.
std::vector<const PassInfo *> registeredPasses();

/// The default pipeline, in order. Every name is a pass of //passes:all,
/// which a binary that runs the pipeline links.
llvm::ArrayRef<const char *> defaultPipeline();

/// Describes the default pipeline and all registered passes, for --help.
std::string describePasses();

class PassManager {
public:
  explicit PassManager(PassContext &context) : context(context) {}

  /// Adds the passes of "a,b,c" (empty: none). An unknown name is an error
  /// that lists the registered passes.
  llvm::Error addPipeline(llvm::StringRef commaSeparated);
  /// Adds the passes of defaultPipeline(), less those named in `skip` (e.g.
  /// bulk-order, to measure a bulk in its written order). The binary must
  /// link //passes:all; one that does not stops here, naming the pass.
  void addDefaultPipeline(llvm::ArrayRef<std::string> skip = {});
  void addPass(llvm::StringRef name, std::unique_ptr<Pass> pass);
  /// The names of the passes that will run, in order.
  std::vector<std::string> getPassNames() const;

  /// Print the IR to `stream` after every pass / after passes named so.
  void setPrintAfterAll(bool enable) { printAfterAll = enable; }
  /// Unknown names are an error, so a typo does not silently print nothing.
  llvm::Error addPrintAfter(llvm::StringRef passName);
  void setPrintStream(llvm::raw_ostream &stream) { printStream = &stream; }
  void setPrintOptions(const ir::PrintOptions &options) {
    printOptions = options;
  }

  /// After the passes, print how many rewrites each pass that counts them
  /// made, to the print stream (spanc opt --stats).
  void setPrintStatistics(bool enable) { printStatistics = enable; }

  /// Verify after every pass (the default; names the pass that broke the
  /// IR), or only once after the last pass (cheaper on large programs; an
  /// ill-formed result is still rejected, but not pinned to a pass).
  void setVerifyEach(bool enable) { verifyEach = enable; }

  /// Runs the passes in order, verifying after each (or after the last, see
  /// setVerifyEach). Fails when a pass fails or leaves ill-formed IR (the
  /// diagnostics say where).
  llvm::Error run(ir::Module &module);

private:
  PassContext &context;
  std::vector<std::pair<std::string, std::unique_ptr<Pass>>> passes;
  bool printAfterAll = false;
  bool printStatistics = false;
  bool verifyEach = true;
  llvm::StringSet<> printAfter;
  llvm::raw_ostream *printStream = &llvm::errs();
  ir::PrintOptions printOptions;
};

} // namespace spanc::passes

#endif // SPANC_PASSES_PASSMANAGER_H
