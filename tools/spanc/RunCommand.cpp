//===- RunCommand.cpp - spanc run: compile and execute span queries -------===//
//
// .span/.json/.ir → optimized IR (the default pipeline) → plan (lowering
// through the model's chat template) → the executor over the paged KV
// cache. Answers go to stdout (streamed when the program has one answer),
// per-call statistics to stderr with --stats, everything as JSON with
// --json.
//
//===----------------------------------------------------------------------===//

#include "codegen/CompilePipeline.h"
#include "codegen/Lowering.h"
#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/AdaptiveThreads.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kv/BlockPool.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Model.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"
#include "tools/spanc/CommandLine.h"
#include "tools/spanc/CompileOptions.h"
#include "tools/spanc/DeviceOption.h"
#include "tools/spanc/GemmOptions.h"
#include "tools/spanc/Interrupt.h"
#include "tools/spanc/IsaOption.h"
#include "tools/spanc/KvCacheCapacity.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/SpanModeOptions.h"
#include "tools/spanc/ThreadsOption.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <chrono>

namespace spanc::cli {

namespace {

/// --repeat reruns the whole program; more is a benchmark's business.
constexpr int64_t kMaxRepeat = 1000;

void printStats(const plan::Plan &plan,
                llvm::ArrayRef<sched::CallOutcome> outcomes, double wallSeconds,
                llvm::raw_ostream &os) {
  os << "call  query         prompt  reused    comp   reloc   hit%   ttft_ms"
        "    gen dec_tok/s  status\n";
  sched::CallStats total;
  for (const plan::Call &call : plan.calls) {
    const sched::CallOutcome &outcome = outcomes[call.id];
    const sched::CallStats &stats = outcome.stats;
    os << llvm::format(
        "#%-4u %-12s %7u %7u %7u %7u %6.1f %9.1f %6u %9.1f  %s\n", call.id,
        call.query.substr(0, 12).c_str(), stats.promptTokens,
        stats.reusedTokens, stats.computedTokens, stats.relocatedTokens,
        100.0 * stats.hitRate(), 1e3 * stats.ttftSeconds, stats.generatedTokens,
        stats.decodeTokensPerSecond(),
        outcome.succeeded ? (call.cacheOnly ? "ok (cache only)" : "ok")
                          : "FAILED");
    total.promptTokens += stats.promptTokens;
    total.reusedTokens += stats.reusedTokens;
    total.computedTokens += stats.computedTokens;
    total.relocatedTokens += stats.relocatedTokens;
    total.blendedTokens += stats.blendedTokens;
    total.probeTokens += stats.probeTokens;
    total.probeSeconds += stats.probeSeconds;
    total.generatedTokens += stats.generatedTokens;
  }
  for (const plan::QueryPlan &query : plan.queries) {
    double ttft = 0;
    for (const plan::ResultItem &item : query.results)
      if (item.call)
        ttft = std::max(ttft, outcomes[*item.call].stats.ttftSeconds);
    os << llvm::format("query @%s: %zu calls, slowest answer TTFT %.1f ms\n",
                       query.name.c_str(), query.calls.size(), 1e3 * ttft);
  }
  os << llvm::format("total: %zu calls, prompt %u tokens (reused %u = %.1f%%, "
                     "computed %u, relocated %u), generated %u, wall %.2f s\n",
                     plan.calls.size(), total.promptTokens, total.reusedTokens,
                     100.0 * total.hitRate(), total.computedTokens,
                     total.relocatedTokens, total.generatedTokens, wallSeconds);
  if (total.blendedTokens)
    os << "repair: " << total.blendedTokens
       << " span tokens recomputed through every layer\n";
  if (total.probeTokens)
    os << llvm::format("repair probe: %u question tokens over the stitched "
                       "spans, %.1f ms\n",
                       total.probeTokens, 1e3 * total.probeSeconds);
}

nlohmann::json toJson(const plan::Plan &plan,
                      llvm::ArrayRef<sched::CallOutcome> outcomes,
                      double wallSeconds) {
  nlohmann::json result;
  result["wall_seconds"] = wallSeconds;
  nlohmann::json &queries = result["queries"] = nlohmann::json::array();
  for (const plan::QueryPlan &query : plan.queries) {
    nlohmann::json entry;
    entry["name"] = query.name;
    nlohmann::json &answers = entry["results"] = nlohmann::json::array();
    for (const plan::ResultItem &item : query.results) {
      if (!item.call) {
        answers.push_back({{"text", item.text}});
        continue;
      }
      const sched::CallOutcome &outcome = outcomes[*item.call];
      nlohmann::json answer = {{"call", *item.call}, {"text", outcome.text}};
      if (!outcome.succeeded)
        answer["error"] = outcome.error;
      answers.push_back(answer);
    }
    queries.push_back(entry);
  }
  nlohmann::json &calls = result["calls"] = nlohmann::json::array();
  for (const plan::Call &call : plan.calls) {
    const sched::CallOutcome &outcome = outcomes[call.id];
    const sched::CallStats &stats = outcome.stats;
    calls.push_back(
        {{"id", call.id},
         {"query", call.query},
         {"cache_only", call.cacheOnly},
         {"succeeded", outcome.succeeded},
         {"error", outcome.error},
         {"prompt_tokens", stats.promptTokens},
         {"reused_tokens", stats.reusedTokens},
         {"computed_tokens", stats.computedTokens},
         {"relocated_tokens", stats.relocatedTokens},
         {"blended_tokens", stats.blendedTokens},
         {"probe_tokens", stats.probeTokens},
         {"probe_seconds", stats.probeSeconds},
         {"generated_tokens", stats.generatedTokens},
         {"hit_rate", stats.hitRate()},
         {"ttft_seconds", stats.ttftSeconds},
         {"queued_seconds", stats.queuedSeconds},
         {"total_seconds", stats.totalSeconds},
         {"decode_tokens_per_second", stats.decodeTokensPerSecond()},
         {"preemptions", stats.preemptions},
         {"tokens", outcome.tokens}});
  }
  return result;
}

/// The live progress line on stderr: calls done/total, tokens generated,
/// elapsed seconds. Drawn only once a run has taken `delaySeconds` (quick
/// runs stay quiet), at most ten times a second, and erased by clear().
class ProgressLine {
public:
  ProgressLine(bool enabled, double delaySeconds)
      : enabled(enabled), delaySeconds(delaySeconds),
        start(std::chrono::steady_clock::now()) {}
  ~ProgressLine() { clear(); }

  void update(const sched::ExecutorProgress &progress) {
    if (!enabled)
      return;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (elapsed < delaySeconds || (shown && elapsed - lastDrawn < 0.1))
      return;
    lastDrawn = elapsed;
    // \r returns to the line's start; ESC [K erases what a longer previous
    // line left behind.
    llvm::errs() << llvm::format("\rspanc run: %zu/%zu calls, %llu tokens, "
                                 "%.1f s\x1b[K",
                                 progress.callsDone, progress.callsTotal,
                                 (unsigned long long)progress.tokensGenerated,
                                 elapsed);
    llvm::errs().flush();
    shown = true;
  }

  void clear() {
    if (!shown)
      return;
    llvm::errs() << "\r\x1b[K";
    llvm::errs().flush();
    shown = false;
  }

private:
  bool enabled;
  double delaySeconds;
  std::chrono::steady_clock::time_point start;
  double lastDrawn = 0;
  bool shown = false;
};

/// --bulk DIR: loads every .span/.json program of DIR (in name order) and
/// moves all their queries into one module, so the default pipeline
/// (bulk-order, cse) and the scheduler see one bulk. A query name that
/// occurs in more than one file becomes FILE:QUERY (FILE without its
/// extension). Returns null after reporting through `diagnostics` when a
/// program does not load.
llvm::Expected<std::unique_ptr<ir::Module>>
loadBulk(llvm::StringRef directory, ir::DiagnosticEngine &diagnostics,
         const codegen::CompileOptions &options) {
  std::vector<std::string> paths;
  std::error_code errorCode;
  for (llvm::sys::fs::directory_iterator entry(directory, errorCode), end;
       !errorCode && entry != end; entry.increment(errorCode)) {
    llvm::StringRef extension = llvm::sys::path::extension(entry->path());
    if ((extension == ".span" || extension == ".json") &&
        llvm::sys::fs::is_regular_file(entry->path()))
      paths.push_back(entry->path());
  }
  if (errorCode)
    return llvm::createStringError(errorCode, "--bulk %s: %s",
                                   directory.str().c_str(),
                                   errorCode.message().c_str());
  if (paths.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--bulk %s: no .span or .json file",
                                   directory.str().c_str());
  llvm::sort(paths);

  std::vector<std::unique_ptr<ir::Module>> modules;
  llvm::StringMap<unsigned> nameCounts;
  bool failed = false;
  for (const std::string &path : paths) {
    modules.push_back(codegen::loadSource(path, diagnostics, options));
    if (!modules.back()) {
      failed = true; // keep going: report every broken program at once
      continue;
    }
    for (const std::unique_ptr<ir::Query> &query : modules.back()->getQueries())
      ++nameCounts[query->getName()];
  }
  if (failed)
    return nullptr;
  auto bulk = std::make_unique<ir::Module>();
  for (size_t index = 0; index < modules.size(); ++index) {
    ir::Module &module = *modules[index];
    llvm::StringRef stem = llvm::sys::path::stem(paths[index]);
    while (!module.getQueries().empty()) {
      std::unique_ptr<ir::Query> query = module.takeQuery(0);
      if (nameCounts[query->getName()] > 1)
        query->setName((stem + ":" + query->getName()).str());
      if (bulk->lookupQuery(query->getName()))
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "--bulk %s: two queries are named '%s'",
                                       directory.str().c_str(),
                                       query->getName().str().c_str());
      bulk->insertQuery(std::move(query));
    }
  }
  return bulk;
}

/// spanc run's own options (span modes, device, --max-calls, threads, ISA
/// and file access are added by their shared helpers).
void addRunOptions(po::options_description &options) {
  // The range Executor::create accepts (runtime/kernels/Limits.h).
  const std::string blockSizeHelp = "tokens per KV cache block, in [1, " +
                                    std::to_string(kernels::kMaxBlockSize) +
                                    "]";
  options.add_options()                                                     //
      ("input", po::value<std::string>(),                                   //
       "a .span program, an spnl .json query or a .ir file")                //
      ("bulk", po::value<std::string>(),                                    //
       "DIR: run every .span/.json file of DIR as one bulk (queries whose " //
       "names collide become FILE:QUERY)")                                  //
      ("set", po::value<std::vector<std::string>>()->composing(),           //
       "NAME=VALUE: override `param NAME` (repeatable)")                    //
      ("model,m", po::value<std::string>(),                                 //
       "GGUF model (default: $SPANC_MODEL, else the SmolLM2-135M-Instruct " //
       "that tools/setup.sh installs)")                                     //
      ("cache", po::value<std::string>()->default_value("span"),            //
       "KV cache mode: span (spans hit at any position), prefix (stock "    //
       "prefix caching: the baseline) or off")                              //
      ("relocation",
       po::value<std::string>()->default_value("rope-in-kernel"),         //
       "how reused spans move: rerope (rotate cached K by the position "  //
       "delta, planned by CIDRA) or rope-in-kernel (K stored unrotated)") //
      ("fixed-threads",
       "-t is a ceiling: fewer threads run while other "                    //
       "processes take cores; with this, always -t threads (benchmarks)")   //
      ("kv-cache", po::value<std::string>()->default_value("65536"),        //
       "KV cache capacity: tokens (65536), rounded down to whole blocks, "  //
       "or memory (512MiB, 2GiB)")                                          //
      ("block-size", po::value<int64_t>()->default_value(16),               //
       blockSizeHelp.c_str())                                               //
      ("step-tokens", po::value<int64_t>()->default_value(512),             //
       "token budget of one scheduler step (decode tokens + prefill)")      //
      ("tree-reduce", po::value<int64_t>()->default_value(0),               //
       "tree-reduce gens over a wide plus with this fan-in (0: only gens "  //
       "with reduce=)")                                                     //
      ("skip-pass", po::value<std::vector<std::string>>()->composing(),     //
       "leave this pass out of the default pipeline (repeatable); e.g. "    //
       "bulk-order, to run a bulk in its written (FIFO) order")             //
      ("prepare-fragments",                                                 //
       "warm the cache with one G1 call per retrieved fragment first")      //
      ("repeat", po::value<int64_t>()->default_value(1),                    //
       "run the program this many times against the same (warm) cache "     //
       "(answers are printed once; --stats shows every run), in [1, "       //
       "1000]")                                                             //
      ("batch-invariant",                                                   //
       "f32 GEMMs and attention products everywhere (slower prefill; the "  //
       "default kernels are already chosen per row, so an answer never "    //
       "depends on what shares its step)")                                  //
      ("kv-precision", po::value<std::string>()->default_value("f16"),      //
       "K/V storage: f16 (as llama.cpp's default cache) or f32 (twice the " //
       "memory; ReRoPE and rope-in-kernel then differ only by f32 "         //
       "rounding)")                                                         //
      ("stats",
       po::value<std::string>()->implicit_value("calls")->value_name(
           "detailed"),                                                     //
       "per-call statistics on stderr: TTFT, prompt tokens "                //
       "reused/computed/relocated, hit rate, decode tokens/s; "             //
       "--stats=detailed adds each run's time by phase (compile and plan, " //
       "layout and hashing, lookups, admission, relocations, the forward "  //
       "pass by op and per layer, sampling)")                               //
      ("json", "print results and statistics as JSON on stdout")            //
      ("progress-after", po::value<double>()->default_value(1.0),           //
       "when stderr is a terminal, draw a progress line (calls, tokens, "   //
       "seconds) once a run has taken this many seconds; 0: at once");
}

/// The program of FILE or --bulk DIR, optimized; null after reporting
/// (diagnostics, a program with no query, an interrupt), with the exit
/// code in `exitCode`.
std::unique_ptr<ir::Module>
compileProgram(const po::variables_map &values,
               codegen::CompileOptions &compileOptions,
               ir::DiagnosticEngine &diagnostics, int &exitCode) {
  // Every failure below has been reported; most exit 1.
  exitCode = 1;
  if (values.count("input") == values.count("bulk")) {
    reportError("run", "give either a program FILE or --bulk DIR");
    return nullptr;
  }
  if (!readCompileOptions(
          "run", values,
          values[values.count("bulk") ? "bulk" : "input"].as<std::string>(),
          compileOptions))
    return nullptr;
  deferInterrupts();
  compileOptions.passes.stopRequested = interruptRequested;
  std::unique_ptr<ir::Module> module;
  if (values.count("bulk")) {
    auto bulk =
        loadBulk(values["bulk"].as<std::string>(), diagnostics, compileOptions);
    if (!bulk) {
      reportError("run", llvm::toString(bulk.takeError()));
      return nullptr;
    }
    module = std::move(*bulk);
  } else {
    module = codegen::loadSource(values["input"].as<std::string>(), diagnostics,
                                 compileOptions);
  }
  if (!module)
    return nullptr;
  // A .span program without a query is an error of the frontend; IR may
  // hold none.
  if (module->getQueries().empty()) {
    reportError("run", "the program has no query, so there is nothing "
                       "to run");
    return nullptr;
  }
  auto optimizer = codegen::Optimizer::create(diagnostics, compileOptions);
  if (!optimizer) {
    reportError("run", llvm::toString(optimizer.takeError()));
    return nullptr;
  }
  if (llvm::Error error = (*optimizer)->run(*module)) {
    if (interruptRequested()) {
      llvm::consumeError(std::move(error));
      exitCode =
          reportInterrupted("run", "stopped while compiling; nothing ran");
      return nullptr;
    }
    reportError("run", llvm::toString(std::move(error)));
    return nullptr;
  }
  return module;
}

/// The call whose answer is streamed live: the only answer of the plan,
/// when it is a call.
std::optional<plan::CallId> streamedCall(const plan::Plan &plan) {
  std::optional<plan::CallId> streamed;
  size_t numAnswers = 0;
  for (const plan::QueryPlan &query : plan.queries)
    for (const plan::ResultItem &item : query.results) {
      ++numAnswers;
      if (item.call)
        streamed = *item.call;
    }
  if (numAnswers != 1)
    return std::nullopt;
  return streamed;
}

/// Each query's answers on stdout, under its name.
void printAnswers(const plan::Plan &plan,
                  llvm::ArrayRef<sched::CallOutcome> outcomes) {
  for (const plan::QueryPlan &query : plan.queries) {
    llvm::outs() << "== " << query.name << "\n";
    for (const plan::ResultItem &item : query.results) {
      if (!item.call) {
        llvm::outs() << item.text << "\n";
        continue;
      }
      const sched::CallOutcome &outcome = outcomes[*item.call];
      llvm::outs() << (outcome.succeeded ? outcome.text
                                         : "[failed: " + outcome.error + "]")
                   << "\n";
    }
  }
}

/// Runs `plan` `repeat` times (the first cold, the rest on the cache it
/// left), the first streaming through `onToken`, with a progress line and
/// adaptive threads; each run's statistics go to stderr (--stats) or into
/// `runs` (--json). The exit code when an interrupt stopped it (reported),
/// else nothing, `outcomes` holding the last run's.
std::optional<int>
runRepeatedly(sched::Executor &executor, const plan::Plan &plan,
              const po::variables_map &values, unsigned repeat,
              const sched::TokenCallback &onToken, bool streamed,
              std::vector<sched::CallOutcome> &outcomes, nlohmann::json &runs,
              double compileSeconds, const model::ModelConfig &config) {
  // After omp_set_num_threads: --threads is its ceiling. Adapted after
  // every scheduler step (the progress callback).
  cpu::AdaptiveThreads adaptiveThreads;
  const bool adaptThreads = values.count("fixed-threads") == 0;
  const bool json = values.count("json") != 0;
  // A streamed answer on the same terminal is progress enough (and the
  // two would overwrite each other).
  const bool showProgress =
      llvm::sys::Process::StandardErrIsDisplayed() &&
      !(streamed && llvm::sys::Process::StandardOutIsDisplayed());
  const bool detailed =
      values.count("stats") && values["stats"].as<std::string>() == "detailed";
  for (unsigned iteration = 0; iteration < repeat; ++iteration) {
    executor.resetProfile();
    auto start = std::chrono::steady_clock::now();
    ProgressLine progressLine(showProgress,
                              values["progress-after"].as<double>());
    outcomes = executor.run(
        plan, iteration == 0 ? onToken : nullptr,
        [&](const sched::ExecutorProgress &progress) {
          progressLine.update(progress);
          if (adaptThreads)
            adaptiveThreads.afterStep();
        },
        interruptRequested);
    progressLine.clear();
    if (streamed && iteration == 0) {
      // End the streamed answer's line before any statistics follow.
      llvm::outs() << "\n";
      llvm::outs().flush();
    }
    if (interruptRequested()) {
      size_t finished =
          llvm::count_if(outcomes, [](const sched::CallOutcome &outcome) {
            return outcome.succeeded;
          });
      return reportInterrupted(
          "run", "stopped between two steps of run " +
                     std::to_string(iteration + 1) + " of " +
                     std::to_string(repeat) + ", " + std::to_string(finished) +
                     " of " + std::to_string(plan.calls.size()) +
                     " calls finished; no results printed");
    }
    double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (json)
      runs.push_back(toJson(plan, outcomes, wall));
    if (values.count("stats")) {
      llvm::errs() << "-- run " << iteration + 1 << " of " << repeat << " ("
                   << (iteration == 0 ? "cold" : "warm")
                   << " cache, --cache=" << values["cache"].as<std::string>()
                   << ")\n";
      printStats(plan, outcomes, wall, llvm::errs());
      if (detailed)
        sched::printPhaseProfile(llvm::errs(), executor.profile(),
                                 iteration == 0 ? compileSeconds : 0, &config);
    }
  }
  return std::nullopt;
}

/// --json: every run's results and statistics as one document on stdout.
void printJsonDocument(const std::string &modelPath,
                       const po::variables_map &values,
                       const nlohmann::json &runs) {
  nlohmann::json document = {
      {"model", modelPath},
      {"cache", values["cache"].as<std::string>()},
      {"relocation", values["relocation"].as<std::string>()},
      {"runs", runs}};
  // Answers are model bytes: one may end inside a UTF-8 character (cut by
  // max_tokens) and a fragment may hold invalid UTF-8. Valid JSON with
  // U+FFFD, as the server writes, rather than an exception.
  llvm::outs() << document.dump(2, ' ', false,
                                nlohmann::json::error_handler_t::replace)
               << "\n";
}

/// Each call that failed, on stderr, with where it is in the program.
void reportFailedCalls(const plan::Plan &plan,
                       llvm::ArrayRef<sched::CallOutcome> outcomes) {
  for (const plan::Call &call : plan.calls)
    if (!outcomes[call.id].succeeded)
      llvm::errs() << "spanc run: error: call #" << call.id << " of query @"
                   << call.query
                   << (call.location.empty() ? "" : " (" + call.location + ")")
                   << " failed: " << outcomes[call.id].error << "\n";
}

} // namespace

int runRun(const std::vector<std::string> &args) {
  po::options_description options("Options");
  addRunOptions(options);
  addSpanModeOptions(options);
  addDeviceOption(options);
  addMaxCallsOption(options);
  addThreadsOption(options);
  addGemmOptions(options);
  addIsaOption(options);
  addFileAccessOptions(options);
  po::positional_options_description positional;
  positional.add("input", 1);
  const std::string about =
      "Compiles a span program (the default optimizer pipeline; see 'spanc\n"
      "opt --help'), lowers it to a plan of model calls and executes it on\n"
      "the model with the span-aware KV cache. Several queries in one file\n"
      "run as one bulk, continuously batched.\n\n" +
      limitsHelp(AllLimits);
  ParsedCommandLine parsed = parseCommandLine(
      "run", "spanc run FILE [options] | spanc run --bulk DIR [options]",
      about.c_str(), options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  sched::ExecutorOptions executorOptions;
  if (!readExecutorChoices("run", values, executorOptions))
    return 1;
  // The range Executor::create accepts, checked here to report the value
  // as it was given.
  std::optional<int64_t> blockSize =
      readBoundedInt("run", values, "block-size", 1, kernels::kMaxBlockSize);
  if (!blockSize)
    return 1;
  executorOptions.blockSize = unsigned(*blockSize);
  std::optional<int64_t> repeatCount =
      readBoundedInt("run", values, "repeat", 1, kMaxRepeat);
  if (!repeatCount)
    return 1;
  executorOptions.stepTokenBudget = values["step-tokens"].as<int64_t>();
  if (values.count("stats")) {
    const std::string stats = values["stats"].as<std::string>();
    if (stats != "calls" && stats != "detailed")
      return reportError("run", "--stats=" + stats +
                                    ": expected --stats or --stats=detailed");
    executorOptions.profile = stats == "detailed";
  }
  if (!applyIsaOption("run", values))
    return 1;
  if (!applyThreadsOption("run", values))
    return 1;

  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  codegen::CompileOptions compileOptions;
  int exitCode = 0;
  const auto compileStart = std::chrono::steady_clock::now();
  std::unique_ptr<ir::Module> module =
      compileProgram(values, compileOptions, diagnostics, exitCode);
  if (!module)
    return exitCode;

  // Lower through the model's chat template before its weights load, so
  // that a plan past a limit is reported in a moment: only the tokenizer
  // and the template are read (the file is mapped).
  std::string modelPath = values.count("model")
                              ? values["model"].as<std::string>()
                              : defaultModelPath();
  model::ModelOptions modelOptions;
  modelOptions.forceF32 = values.count("batch-invariant") != 0;
  std::optional<GemmChoices> gemmChoices = readGemmOptions("run", values);
  if (!gemmChoices)
    return 1;
  modelOptions.gemmWeightCopy = gemmChoices->weightCopy;
  modelOptions.quantizedPrompt = gemmChoices->quantizedPrompt;
  const std::string kvPrecision = values["kv-precision"].as<std::string>();
  if (kvPrecision != "f16" && kvPrecision != "f32")
    return reportError("run", "--kv-precision '" + kvPrecision +
                                  "': expected f16 or f32");
  modelOptions.halfPrecisionKv = kvPrecision == "f16";
  // The CUDA backend uploads the file's tensors itself.
  modelOptions.hostWeights = executorOptions.device == backend::Device::Cpu;
  auto modelFile = model::GgufFile::open(modelPath);
  if (!modelFile)
    return reportError("run", "cannot load model '" + modelPath + "': " +
                                  llvm::toString(modelFile.takeError()) +
                                  " (tools/setup.sh installs the default)");
  auto tokenizer = model::Tokenizer::fromGguf(**modelFile);
  if (!tokenizer)
    return reportError("run", llvm::toString(tokenizer.takeError()));
  auto chatTemplate = model::ChatTemplate::fromGguf(**modelFile, **tokenizer);
  if (!chatTemplate)
    return reportError("run", llvm::toString(chatTemplate.takeError()));
  model::ChatTemplateEncoder encoder(*chatTemplate, **tokenizer);
  // Every call's prompt and max_tokens must fit the model's context: found
  // here, before any compute, when the prompt is known (the scheduler
  // checks again once spliced outputs are). A context the file gets wrong
  // is Model::load's to report.
  codegen::LoweringLimits limits = compileOptions.limits;
  limits.contextLength = model::declaredContextLength(**modelFile).value_or(0);
  std::optional<plan::Plan> plan =
      codegen::lowerToPlan(*module, encoder, diagnostics, limits);
  if (!plan)
    return 1;
  // Source to plan, the model's tokenizer and template opened included.
  const double compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    compileStart)
          .count();
  auto model = model::Model::load(modelPath, modelOptions);
  if (!model)
    return reportError("run", "cannot load model '" + modelPath +
                                  "': " + llvm::toString(model.takeError()) +
                                  " (tools/setup.sh installs the default)");

  // A bad --block-size is the executor's to report.
  if (executorOptions.blockSize != 0) {
    auto cacheTokens = kvCacheTokens(values["kv-cache"].as<std::string>(),
                                     **model, executorOptions.blockSize);
    if (!cacheTokens)
      return reportError("run", llvm::toString(cacheTokens.takeError()));
    executorOptions.cacheTokens = *cacheTokens;
  }
  auto executor =
      sched::Executor::create(**model, **tokenizer, executorOptions);
  if (!executor)
    return reportError("run", llvm::toString(executor.takeError()));
  if (interruptRequested())
    return reportInterrupted("run", "stopped before the first call; nothing "
                                    "ran");

  const bool json = values.count("json") != 0;
  std::optional<plan::CallId> streamed =
      json ? std::nullopt : streamedCall(*plan);
  sched::TokenCallback onToken;
  if (streamed)
    onToken = [&](plan::CallId call, llvm::StringRef piece) {
      if (call == *streamed) {
        llvm::outs() << piece;
        llvm::outs().flush();
      }
    };

  std::vector<sched::CallOutcome> outcomes;
  nlohmann::json runs = nlohmann::json::array();
  if (std::optional<int> stopped =
          runRepeatedly(**executor, *plan, values, unsigned(*repeatCount),
                        onToken, streamed.has_value(), outcomes, runs,
                        compileSeconds, (*model)->config()))
    return *stopped;

  bool allSucceeded =
      llvm::all_of(outcomes, [](const sched::CallOutcome &outcome) {
        return outcome.succeeded;
      });
  if (json) {
    printJsonDocument(modelPath, values, runs);
  } else if (!streamed) {
    printAnswers(*plan, outcomes);
  }
  reportFailedCalls(*plan, outcomes);
  return allSucceeded ? 0 : 1;
}

} // namespace spanc::cli
