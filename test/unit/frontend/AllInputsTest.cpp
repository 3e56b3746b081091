//===- AllInputsTest.cpp - Properties of every lit input ------------------===//
//
// Walks every .span, .json and .ir file under test/lit/ and checks, for each
// one that compiles: print then parse gives the same IR (with and without
// locations), and running the default pipeline a second time changes
// nothing. Inputs that are meant to fail say so: a `RUN: not` line, or a
// file name starting with "error".
//
//===----------------------------------------------------------------------===//

#include "frontend/Load.h"
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

using namespace spanc;

namespace {

std::string litRoot() {
  const char *srcdir = std::getenv("TEST_SRCDIR");
  const char *workspace = std::getenv("TEST_WORKSPACE");
  if (!srcdir || !workspace)
    return "";
  llvm::SmallString<256> path(srcdir);
  llvm::sys::path::append(path, workspace, "test", "lit");
  return std::string(path);
}

std::vector<std::string> findInputs(const std::string &root) {
  std::vector<std::string> inputs;
  std::error_code error;
  for (llvm::sys::fs::recursive_directory_iterator it(root, error), end;
       it != end && !error; it.increment(error)) {
    llvm::StringRef extension = llvm::sys::path::extension(it->path());
    if (extension == ".span" || extension == ".json" || extension == ".ir")
      inputs.push_back(it->path());
  }
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

bool isExpectedToFail(const std::string &path) {
  if (llvm::sys::path::filename(path).startswith("error"))
    return true;
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return false;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  return llvm::any_of(lines, [](llvm::StringRef line) {
    return line.contains("RUN:") && line.contains("not spanc");
  });
}

/// Copies the files under `from` into `to` (created), recursively.
void copyTree(const std::string &from, const std::string &to) {
  llvm::sys::fs::create_directories(to);
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(from, error), end;
       it != end && !error; it.increment(error)) {
    llvm::SmallString<256> target(to);
    llvm::sys::path::append(target, llvm::sys::path::filename(it->path()));
    if (llvm::sys::fs::is_directory(it->path()))
      copyTree(it->path(), std::string(target));
    else
      llvm::sys::fs::copy_file(it->path(), target);
  }
}

/// The lit tests stage an input in a writable folder, with the folder's
/// files and the contents of its Inputs/ beside it. This does the same and
/// returns the staged input's path.
std::string stageInput(const std::string &path, unsigned index) {
  const char *tmp = std::getenv("TEST_TMPDIR");
  llvm::SmallString<256> scratch(tmp ? tmp : "/tmp");
  llvm::sys::path::append(scratch, "input-" + std::to_string(index));
  llvm::StringRef folder = llvm::sys::path::parent_path(path);
  copyTree(folder.str(), std::string(scratch));
  llvm::SmallString<256> inputs(folder);
  llvm::sys::path::append(inputs, "Inputs");
  if (llvm::sys::fs::is_directory(inputs))
    copyTree(std::string(inputs), std::string(scratch));
  llvm::sys::path::append(scratch, llvm::sys::path::filename(path));
  return std::string(scratch);
}

/// Diagnostics go to a string, so that a failure shows them.
struct Session {
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics{sourceMgr};
  std::string messages;
  Session() {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diagnostic, void *context) {
          llvm::raw_string_ostream os(*static_cast<std::string *>(context));
          diagnostic.print(nullptr, os, /*ShowColors=*/false);
        },
        &messages);
  }
};

/// What spanc grants a program: its folder (the staged one) for file() and
/// corpora, and an index folder of the test's own.
support::ReadPolicy readPolicyFor(const std::string &path) {
  return support::ReadPolicy::forProgram(path);
}

bool runDefaultPipeline(ir::Module &module, Session &session,
                        const std::string &path) {
  passes::PassOptions options;
  options.corpusIndex.readPolicy = readPolicyFor(path);
  const char *tmp = std::getenv("TEST_TMPDIR");
  llvm::SmallString<256> indexes(tmp ? tmp : "/tmp");
  llvm::sys::path::append(indexes, "indexes");
  options.corpusIndex.indexDirectory = std::string(indexes);
  passes::PassContext context(session.diagnostics, options);
  passes::PassManager manager(context);
  manager.addDefaultPipeline();
  if (llvm::Error error = manager.run(module)) {
    session.messages += llvm::toString(std::move(error)) + "\n";
    return false;
  }
  return true;
}

/// parse(print(module)) == module, with and without locations.
void expectRoundTrip(const ir::Module &module, const std::string &path) {
  for (bool withLocations : {false, true}) {
    Session session;
    ir::PrintOptions options;
    options.printLocations = withLocations;
    std::string text = ir::toString(module, options);
    auto parsed =
        ir::parseModuleString(text, path + ".printed.ir", session.diagnostics);
    ASSERT_TRUE(parsed) << session.messages << text;
    EXPECT_TRUE(ir::verify(*parsed, session.diagnostics)) << session.messages;
    EXPECT_TRUE(ir::isStructurallyEqual(module, *parsed, withLocations))
        << "printed:\n"
        << text << "reprinted:\n"
        << ir::toString(*parsed, options);
  }
}

} // namespace

TEST(AllLitInputs, RoundTripAndPipelineIsIdempotent) {
  std::string root = litRoot();
  ASSERT_FALSE(root.empty()) << "run under bazel test (TEST_SRCDIR unset)";
  std::vector<std::string> inputs = findInputs(root);
  // The lit suite has dozens of inputs; finding few means the data
  // dependency is broken, not that there is little to check.
  ASSERT_GE(inputs.size(), 20u) << "lit inputs not found under " << root;

  unsigned checked = 0, optimized = 0, skipped = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string &original = inputs[i];
    SCOPED_TRACE(original);
    bool expectFailure = isExpectedToFail(original);
    std::string path = stageInput(original, i);
    Session session;
    frontend::FrontendOptions frontendOptions;
    frontendOptions.readPolicy = readPolicyFor(path);
    std::unique_ptr<ir::Module> module =
        frontend::loadModule(path, session.diagnostics, frontendOptions);
    if (!module) {
      EXPECT_TRUE(expectFailure)
          << "does not compile, but is not marked to fail:\n"
          << session.messages;
      ++skipped;
      continue;
    }
    ++checked;
    expectRoundTrip(*module, path);

    if (!runDefaultPipeline(*module, session, path)) {
      EXPECT_TRUE(expectFailure) << "the default pipeline fails:\n"
                                 << session.messages;
      continue;
    }
    ++optimized;
    expectRoundTrip(*module, path);
    std::string once = ir::toString(*module);
    ASSERT_TRUE(runDefaultPipeline(*module, session, path)) << session.messages;
    EXPECT_EQ(once, ir::toString(*module))
        << "the default pipeline changed its own output";
  }
  std::printf("lit inputs: %zu, compiled and round-tripped: %u, optimized "
              "twice: %u, expected failures skipped: %u\n",
              inputs.size(), checked, optimized, skipped);
  EXPECT_GE(checked, 10u);
}
