//===- ExecutorTestUtils.h - Models, plans and answers for executor tests -===//
//
// What the tests that run span queries through sched::Executor share (the
// CPU's test/unit/sched/ExecutorTest.cpp and the GPU's
// test/unit/backend/CudaBackendTest.cpp): a test model's path, a model
// loaded with its tokenizer and chat template, span source compiled through
// the default pipeline into a plan, and the answers and reuse of a run.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TEST_UNIT_SCHED_EXECUTORTESTUTILS_H
#define SPANC_TEST_UNIT_SCHED_EXECUTORTESTUTILS_H

#include "plan/Plan.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace spanc::sched {

/// Two documents (`let pool`, `let rope`; no newline after the last) for
/// span queries to fragment.
extern const char kPoolAndRopeDocuments[];

/// A test model's path: under SPANC_ROOT (or ".") for an installed model
/// (tools/setup.sh), else relative to the test's working directory, the
/// runfiles root (a generated one).
std::string testModelPath(const std::string &path, bool installed);

/// A model with its tokenizer and chat template.
struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<model::ChatTemplate> chatTemplate;
};

/// Loads the model at `path` with `options`, and its tokenizer and chat
/// template from its file.
llvm::Expected<std::unique_ptr<LoadedModel>>
loadChatModel(const std::string &path, const model::ModelOptions &options);

/// An executor over `loaded`'s model; nullptr (and a test failure) when it
/// cannot be made.
std::unique_ptr<Executor> createExecutor(const LoadedModel &loaded,
                                         const ExecutorOptions &options);

/// Compiles `source` (span text) through the default pipeline and lowers it
/// with `loaded`'s chat template; any failure is a test failure (and an
/// empty plan).
plan::Plan compilePlan(const std::string &source, const LoadedModel &loaded);

/// Answers by query name (every result call's tokens, in order); a call
/// that failed is a test failure.
using Answers = std::map<std::string, std::vector<kv::TokenId>>;
Answers answers(const plan::Plan &plan,
                const std::vector<CallOutcome> &outcomes);

/// The prompt tokens the calls found cached.
uint32_t reusedTokens(const std::vector<CallOutcome> &outcomes);

} // namespace spanc::sched

#endif // SPANC_TEST_UNIT_SCHED_EXECUTORTESTUTILS_H
