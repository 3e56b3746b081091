//===- RagBench.cpp - `spanc bench rag`: the paper's RAG microbenchmark ---===//
//
// TTFT of a RAG query over N documents of random text (a short system
// prompt, the documents under a `plus`, a question as the tail), stock
// prefix caching against span caching, side by side in one process (the
// model loads once). Per document count and repetition, with new documents
// and a new system prompt each time (so "cold" is cold) and max_tokens = 1:
//   prefix-cold           --cache=prefix, documents in order A
//   prefix-warm-shuffled  --cache=prefix, the same documents in order B:
//                         what a prefix cache gives on a shuffled repeat
//                         (the stock baseline)
//   span-miss-<reloc>     --cache=span, order A, cold
//   span-hit-<reloc>      --cache=span, order B, warm
//   span-miss-<mode> / span-hit-<mode>
//                         the same for each span accuracy mode of `modes`
//                         (isolated, prefix+recompute1, ...; issue 14),
//                         rope-in-kernel; the default mode (prefix+end1)
//                         is the span-*-rope-in-kernel rows.
//   llama-server-cold / llama-server-shuffled (when the peer is enabled):
//                         the same prompts rendered through the chat
//                         template as raw text, served by llama.cpp with
//                         --cache-reuse, timings.prompt_ms as TTFT.
// Order B is a shuffle whose first document differs from A's, so a prefix
// cache can reuse nothing past the system prompt.
//
//===----------------------------------------------------------------------===//

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/RandomText.h"
#include "bench/common/Report.h"
#include "bench/rag/RagPeer.h"
#include "bench/rag/RagProfile.h"
#include "bench/rag/RagSettings.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

namespace spanc::bench {

namespace {

/// A permutation of 0..n-1 whose first element is not `avoidFirst` (for
/// n > 1).
std::vector<unsigned> shuffledOrder(unsigned n, std::mt19937_64 &random,
                                    unsigned avoidFirst) {
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i)
    order[i] = i;
  do
    std::shuffle(order.begin(), order.end(), random);
  while (n > 1 && order[0] == avoidFirst);
  return order;
}

/// The .span source of one RAG query over `documents` in `order`.
std::string ragSource(llvm::ArrayRef<std::string> documents,
                      llvm::ArrayRef<unsigned> order,
                      llvm::StringRef systemPrompt, llvm::StringRef question) {
  std::string source;
  for (unsigned i = 0; i < documents.size(); ++i)
    source +=
        "let d" + std::to_string(i) + " = " + spanLiteral(documents[i]) + "\n";
  source += "query rag {\n  gen(max_tokens = 1, temperature = 0) {\n"
            "    system " +
            spanLiteral(systemPrompt) + "\n    plus {";
  for (unsigned index : order)
    source += " fragment d" + std::to_string(index);
  source += " }\n    user " + spanLiteral(question) + "\n  }\n}\n";
  return source;
}

/// One measured call (a row of rag.tsv).
struct Row {
  unsigned docs = 0, rep = 0;
  std::string config;
  double ttftMs = 0;
  uint32_t prompt = 0, reused = 0, computed = 0, relocated = 0;
  /// Span tokens a repair (blend, guided) recomputed through every layer,
  /// and a guided repair's first pass: part of the TTFT, not of `computed`.
  double repairedTokens = 0;
  double probeMs = 0;
  /// Where its time went (sched::PhaseProfile), its compile included.
  PhaseBreakdown breakdown;
};

/// Rows of one configuration at one document count.
std::vector<double> ttftsOf(llvm::ArrayRef<Row> rows, unsigned docs,
                            llvm::StringRef config) {
  std::vector<double> values;
  for (const Row &row : rows)
    if (row.docs == docs && row.config == config)
      values.push_back(row.ttftMs);
  return values;
}

const Row *firstRow(llvm::ArrayRef<Row> rows, unsigned docs,
                    llvm::StringRef config) {
  for (const Row &row : rows)
    if (row.docs == docs && row.config == config)
      return &row;
  return nullptr;
}

/// One executor per configuration: stock prefix caching, span caching per
/// relocation strategy, and per span mode (null where the mode is the
/// default one, which the relocation rows measure).
struct RagExecutors {
  std::unique_ptr<sched::Executor> prefix;
  std::vector<std::unique_ptr<sched::Executor>> span;
  std::vector<std::unique_ptr<sched::Executor>> modes;
};

/// The cache holds two 8k contexts by default, so the warm run of a
/// repetition always finds what its cold run left.
llvm::Expected<RagExecutors> makeRagExecutors(const ModelSession &model,
                                              const RagSettings &settings) {
  auto executorOptions = [&](kv::CacheMode cacheMode,
                             kv::RelocationMode relocation) {
    sched::ExecutorOptions options;
    options.cacheMode = cacheMode;
    options.relocationMode = relocation;
    options.cacheTokens = settings.cacheTokens;
    options.stepTokenBudget = settings.stepTokens;
    options.profile = true; // the breakdown tables: a clock read per op
    // Every configuration's pool is faulted in before anything is timed,
    // as llama-server clears its K/V at startup: a request's time must not
    // depend on whether the VM's host had backed that memory yet (~300 ms
    // of 4k-token prefill here when it had not).
    options.prefaultKv = true;
    return options;
  };
  RagExecutors executors;
  auto prefix = model.makeExecutor(
      executorOptions(kv::CacheMode::Prefix, kv::RelocationMode::RopeInKernel));
  if (!prefix)
    return prefix.takeError();
  executors.prefix = std::move(*prefix);
  for (kv::RelocationMode mode : settings.relocations) {
    auto executor =
        model.makeExecutor(executorOptions(kv::CacheMode::Span, mode));
    if (!executor)
      return executor.takeError();
    executors.span.push_back(std::move(*executor));
  }
  for (const kv::SpanOptions &mode : settings.spanModes) {
    if (settings.isAlias(mode)) {
      executors.modes.push_back(nullptr);
      continue;
    }
    sched::ExecutorOptions options =
        executorOptions(kv::CacheMode::Span, kv::RelocationMode::RopeInKernel);
    options.spanOptions = mode;
    auto executor = model.makeExecutor(options);
    if (!executor)
      return executor.takeError();
    executors.modes.push_back(std::move(*executor));
  }
  return executors;
}

/// The llama-server column: the running peer, or why there is none.
struct PeerColumn {
  std::unique_ptr<RagPeer> peer;
  std::string note;
};

/// `peer=auto` goes without the column when the peer cannot start;
/// `peer=on` fails instead.
llvm::Expected<PeerColumn> startPeerColumn(const BenchArgs &args,
                                           const ModelSession &model,
                                           const RagSettings &settings) {
  PeerColumn column;
  if (settings.peer == "off")
    return column;
  auto started = RagPeer::start(args, model);
  if (!started) {
    column.note = llvm::toString(started.takeError());
    if (settings.peer == "on")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the llama-server peer: %s",
                                     column.note.c_str());
  } else
    column.peer = std::move(*started);
  return column;
}

const char *const RagQuestion = "Which document mentions the river first?";

/// Runs one call of `plan` (compiled in `compileSeconds`) and records its
/// row.
llvm::Error measureCall(const ModelSession &model, sched::Executor &executor,
                        const plan::Plan &plan, double compileSeconds,
                        unsigned docs, unsigned rep, std::string config,
                        std::vector<Row> &rows) {
  executor.resetProfile();
  auto outcomes = model.run(executor, plan);
  if (!outcomes)
    return outcomes.takeError();
  const sched::CallStats &stats = outcomes->back().stats;
  Row row{
      docs,
      rep,
      std::move(config),
      1e3 * stats.ttftSeconds,
      stats.promptTokens,
      stats.reusedTokens,
      stats.computedTokens,
      stats.relocatedTokens,
      double(stats.blendedTokens),
      1e3 * stats.probeSeconds,
      breakdownOf(executor.profile(), model.model().config(), compileSeconds)};
  llvm::errs() << llvm::format(
      "rag: docs %2u rep %2u %-24s ttft %9.1f ms prompt %5u reused %5u "
      "computed %5u relocated %5u repaired %5.0f probe %6.1f ms\n",
      docs, rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
      row.computed, row.relocated, row.repairedTokens, row.probeMs);
  llvm::errs() << "rag:   " << describeBreakdown(row.breakdown) << "\n";
  rows.push_back(std::move(row));
  return llvm::Error::success();
}

/// The peer's two rows of a repetition: order A cold, then order B.
llvm::Error measurePeer(RagPeer &peer, const plan::Plan &planA,
                        const plan::Plan &planB, unsigned docs, unsigned rep,
                        std::vector<Row> &rows) {
  for (auto [order, config] : {std::pair{&planA, "llama-server-cold"},
                               std::pair{&planB, "llama-server-shuffled"}}) {
    auto completion = peer.complete(*order);
    if (!completion)
      return completion.takeError();
    Row row{docs,
            rep,
            config,
            completion->promptMs,
            uint32_t(completion->promptTokensTotal),
            uint32_t(std::max(0, completion->promptTokensTotal -
                                     completion->promptTokensComputed)),
            uint32_t(completion->promptTokensComputed),
            0,
            0,
            0,
            PhaseBreakdown()};
    llvm::errs() << llvm::format(
        "rag: docs %2u rep %2u %-24s ttft %9.1f ms prompt %5u reused "
        "%5u computed %5u\n",
        docs, rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
        row.computed);
    rows.push_back(std::move(row));
  }
  return llvm::Error::success();
}

/// Touches each executor once (page faults of the first KV writes, lazy
/// weight repacking), so the first repetition is not an outlier.
llvm::Error warmUp(const BenchArgs &args, const ModelSession &model,
                   RagExecutors &executors) {
  std::vector<std::string> documents = {
      makeDocument(model.tokenizer(), args.seed * 7919 + 999999, 64)};
  auto plan = model.compile(ragSource(documents, {0}, "Warm-up.", RagQuestion));
  if (!plan)
    return plan.takeError();
  if (auto outcomes = model.run(*executors.prefix, *plan); !outcomes)
    return outcomes.takeError();
  for (auto &executor : executors.span)
    if (auto outcomes = model.run(*executor, *plan); !outcomes)
      return outcomes.takeError();
  for (auto &executor : executors.modes)
    if (executor)
      if (auto outcomes = model.run(*executor, *plan); !outcomes)
        return outcomes.takeError();
  return llvm::Error::success();
}

/// One measurement point: new documents and system prompt for (docs, rep),
/// orders A and B, and every configuration's miss (A) and hit (B).
llvm::Error measureRepetition(const BenchArgs &args,
                              const RagSettings &settings,
                              const ModelSession &model,
                              RagExecutors &executors, RagPeer *peer,
                              unsigned docs, int rep, std::vector<Row> &rows) {
  uint64_t seed = (args.seed * 1000003 + docs) * 1000 + rep;
  std::vector<std::string> documents;
  for (unsigned i = 0; i < docs; ++i)
    documents.push_back(makeDocument(model.tokenizer(), seed * 100 + i,
                                     size_t(settings.documentTokens)));
  std::string system = "You answer questions about the documents. "
                       "Session " +
                       std::to_string(seed) + ".";
  std::mt19937_64 random(seed);
  std::vector<unsigned> orderA = shuffledOrder(docs, random, docs);
  std::vector<unsigned> orderB = shuffledOrder(docs, random, orderA[0]);
  const auto compileStart = std::chrono::steady_clock::now();
  auto planA = model.compile(ragSource(documents, orderA, system, RagQuestion));
  if (!planA)
    return planA.takeError();
  const auto compiledA = std::chrono::steady_clock::now();
  auto planB = model.compile(ragSource(documents, orderB, system, RagQuestion));
  if (!planB)
    return planB.takeError();
  const double compileSeconds[] = {
      std::chrono::duration<double>(compiledA - compileStart).count(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    compiledA)
          .count()};
  auto measure = [&](sched::Executor &executor, const plan::Plan &plan,
                     std::string config) {
    return measureCall(model, executor, plan,
                       compileSeconds[&plan == &*planA ? 0 : 1], docs,
                       unsigned(rep), std::move(config), rows);
  };
  if (auto error = measure(*executors.prefix, *planA, "prefix-cold"))
    return error;
  if (auto error = measure(*executors.prefix, *planB, "prefix-warm-shuffled"))
    return error;
  for (size_t r = 0; r < executors.span.size(); ++r) {
    std::string name = kv::relocationModeName(settings.relocations[r]);
    if (auto error = measure(*executors.span[r], *planA, "span-miss-" + name))
      return error;
    if (auto error = measure(*executors.span[r], *planB, "span-hit-" + name))
      return error;
  }
  for (size_t m = 0; m < settings.spanModes.size(); ++m) {
    if (!executors.modes[m])
      continue;
    if (auto error =
            measure(*executors.modes[m], *planA,
                    settings.modeConfig("miss", settings.spanModes[m])))
      return error;
    if (auto error = measure(*executors.modes[m], *planB,
                             settings.modeConfig("hit", settings.spanModes[m])))
      return error;
  }
  if (peer && rep < settings.peerRepetitionsFor(docs))
    return measurePeer(*peer, *planA, *planB, docs, unsigned(rep), rows);
  return llvm::Error::success();
}

/// What a run measured, and under what conditions.
struct RagMeasurements {
  std::vector<Row> rows;
  double elapsedSeconds = 0;
  std::string loadLine;
  bool outOfTime = false;
};

/// Every repetition, round-robin over document counts, so an interrupted
/// run still has a first repetition of every count and the load drifts
/// over all of them.
llvm::Expected<RagMeasurements>
measureAll(const BenchArgs &args, const RagSettings &settings,
           const ModelSession &model, RagExecutors &executors, RagPeer *peer) {
  RagMeasurements measured;
  LoadSampler load;
  auto started = std::chrono::steady_clock::now();
  if (auto error = warmUp(args, model, executors))
    return error;
  int rounds = 0;
  for (int64_t docs : settings.documentCounts)
    rounds = std::max(rounds, settings.repetitionsFor(docs));
  for (int rep = 0; rep < rounds && !measured.outOfTime; ++rep)
    for (int64_t docs : settings.documentCounts) {
      if (rep >= settings.repetitionsFor(docs))
        continue;
      if (rep > 0 && settings.budgetSeconds > 0 &&
          std::chrono::steady_clock::now() - started >
              std::chrono::seconds(settings.budgetSeconds)) {
        measured.outOfTime = true;
        break;
      }
      if (auto error = measureRepetition(args, settings, model, executors, peer,
                                         unsigned(docs), rep, measured.rows))
        return error;
    }
  measured.elapsedSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  measured.loadLine = load.stopAndDescribe();
  return measured;
}

/// rag.tsv: every row, what plot.py and pareto.py read.
std::string ragTsv(llvm::ArrayRef<Row> rows) {
  std::string tsv = "docs\trep\tconfig\tttft_ms\tprompt\treused\tcomputed\t"
                    "relocated\trepaired\tprobe_ms\n";
  for (const Row &row : rows)
    tsv +=
        printed("%u\t%u\t%s\t%.3f\t%u\t%u\t%u\t%u\t%.0f\t%.3f\n", row.docs,
                row.rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
                row.computed, row.relocated, row.repairedTokens, row.probeMs);
  return tsv;
}

/// The median of `value(row)` over the rows of one configuration at one
/// document count; 0 when there are none.
template <typename Value>
double medianWhere(llvm::ArrayRef<Row> rows, unsigned docs,
                   llvm::StringRef config, Value value) {
  std::vector<double> values;
  for (const Row &row : rows)
    if (row.docs == docs && row.config == config)
      values.push_back(value(row));
  return values.empty() ? 0.0 : summarize(values).median;
}

/// The median of a row's `field`, or of its phase breakdown's.
double medianOf(llvm::ArrayRef<Row> rows, unsigned docs, llvm::StringRef config,
                double Row::*field = &Row::ttftMs) {
  return medianWhere(rows, docs, config,
                     [field](const Row &row) { return row.*field; });
}
double medianOf(llvm::ArrayRef<Row> rows, unsigned docs, llvm::StringRef config,
                double PhaseBreakdown::*field) {
  return medianWhere(rows, docs, config,
                     [field](const Row &row) { return row.breakdown.*field; });
}

/// rag.md's title and setup: what ran, where, and how it was scaled.
void writeRagSetup(llvm::raw_ostream &out, const BenchArgs &args,
                   const RagSettings &settings, const ModelSession &model,
                   const PeerColumn &peerColumn,
                   const RagMeasurements &measured) {
  const RagPeer *peer = peerColumn.peer.get();
  const std::vector<int64_t> &documentCounts = settings.documentCounts;
  out << "# RAG microbenchmark: TTFT, stock prefix caching vs span caching"
      << (peer ? " vs llama.cpp" : "") << "\n\n"
      << "Generated by `spanc bench rag" << commandLine(args)
      << "` (bench/rag/RagBench.cpp) on " << timestampNow() << " in "
      << llvm::format("%.0f", measured.elapsedSeconds) << " s.\n\n"
      << "## Setup\n\n"
      << "- Model: " << model.describeModel()
      << ", default GEMMs (bf16 where the CPU has it), greedy, "
         "`max_tokens = 1` (TTFT only), "
      << omp_get_max_threads() << " threads.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << measured.loadLine
      << " (a shared machine: compare columns, which ran interleaved, "
         "not runs).\n"
      << "- Query: a short system prompt (new per repetition, so nothing is "
         "warm from before), N documents of random English words of "
      << settings.documentTokens
      << " tokens each under a `plus` (new documents per repetition), "
         "the question as the tail; .span text → default passes → "
         "chat-template lowering → executor, one model load.\n"
      << "- Per repetition: order A and a shuffled order B (its first "
         "document differs from A's). `prefix-cold`: --cache=prefix on A; "
         "`prefix-warm-shuffled`: then B — **the stock baseline**, what a "
         "prefix cache gives on a shuffled repeat (it reuses the system "
         "prompt only); `span-miss`: --cache=span on A, cold; `span-hit`: "
         "then B, warm (relocation: rope-in-kernel rotates K inside "
         "attention, rerope rotates the stored K by the position delta).\n"
      << "- Scaled for a 2-core CPU and an 8 192-token model: documents of "
      << settings.documentTokens
      << " tokens (the paper: 2 857), at most 15 documents (15 × 512 "
         "tokens + prompt ≈ 7.7k fits the context); "
      << "repetitions planned per count: ";
  for (int64_t docs : documentCounts)
    out << (docs == documentCounts.front() ? "" : ", ") << docs << " docs × "
        << settings.repetitionsFor(docs);
  if (peer) {
    out << "; the peer's repetitions: ";
    for (int64_t docs : documentCounts)
      out << (docs == documentCounts.front() ? "" : ", ") << docs << " docs × "
          << settings.peerRepetitionsFor(docs);
    out << " (the first ones of each count: llama-server's long prefills "
           "take up to a minute each on two cores)";
  }
  if (settings.budgetSeconds > 0)
    out << "; no repetition starts after " << settings.budgetSeconds << " s"
        << (measured.outOfTime ? " — this run hit that budget, so the counts "
                                 "below are what ran"
                               : "");
  out << ". Caches of " << settings.cacheTokens << " tokens"
      << (settings.cacheTokens == 20480 ? " (two full contexts)" : "")
      << ", block 16, step budget " << settings.stepTokens << ", device "
      << backend::deviceName(args.device) << ".\n";
  if (peer)
    out << "- Peer: " << peer->describe()
        << ". The same prompts rendered as raw ChatML text; "
           "`llama-server-cold` sends order A, `llama-server-shuffled` then "
           "order B (what `--cache-reuse` recovers); TTFT = the server's "
           "timings.prompt_ms, side by side in the same run.\n";
  else if (!peerColumn.note.empty())
    out << "- Peer: no llama-server column (" << peerColumn.note << ").\n";
}

/// The TTFT table, a column per configuration, and the repetitions that
/// ran (the budget may have cut them).
void writeTtftTable(llvm::raw_ostream &out, const RagSettings &settings,
                    llvm::ArrayRef<Row> rows,
                    llvm::ArrayRef<std::string> configs, bool withPeer) {
  const std::vector<int64_t> &documentCounts = settings.documentCounts;
  out << "\n## TTFT (ms, median [min, max])\n\n| docs | prompt tokens |";
  for (const std::string &config : configs)
    out << " " << config << " |";
  out << "\n|---:|---:|";
  for (size_t i = 0; i < configs.size(); ++i)
    out << "---:|";
  out << "\n";
  for (int64_t docsValue : documentCounts) {
    unsigned docs = unsigned(docsValue);
    const Row *first = firstRow(rows, docs, "prefix-cold");
    out << "| " << docs << " | " << (first ? first->prompt : 0) << " |";
    for (const std::string &config : configs) {
      std::vector<double> values = ttftsOf(rows, docs, config);
      out << " " << (values.empty() ? "—" : formatSpread(summarize(values), 0))
          << " |";
    }
    out << "\n";
  }
  out << "\nRepetitions that ran: ";
  for (int64_t docs : documentCounts) {
    out << (docs == documentCounts.front() ? "" : ", ") << docs << " docs × "
        << ttftsOf(rows, unsigned(docs), "prefix-cold").size();
    if (withPeer)
      out << " (peer "
          << ttftsOf(rows, unsigned(docs), "llama-server-cold").size() << ")";
  }
  out << ".\n";
}

/// Stock against hit and miss per relocation strategy (and the peer), with
/// a verdict per goal of issue 7.
void writeHeadlineRatios(llvm::raw_ostream &out, const RagSettings &settings,
                         llvm::ArrayRef<Row> rows, bool withPeer) {
  const std::vector<kv::RelocationMode> &relocations = settings.relocations;
  out << "\n## Headline ratios (median TTFT)\n\n"
      << "Stock = `prefix-warm-shuffled`. Goals (issue 7): hit ≥ 10× faster "
         "than stock at 8+ documents; miss faster than stock from 4 "
         "documents on. *Stock / hit in FLOPs* divides the layers' work "
         "(attention over the keys each computed row sees, and the GEMMs; "
         "median GFLOP) of the stock call by the hit's: the TTFT ratio a hit "
         "reaches when it runs at the stock prefill's FLOP rate, and beyond "
         "which it must run faster per FLOP than that prefill.\n\n| docs |";
  for (kv::RelocationMode mode : relocations)
    out << " stock / hit (" << kv::relocationModeName(mode) << ") |";
  for (kv::RelocationMode mode : relocations)
    out << " stock / miss (" << kv::relocationModeName(mode) << ") |";
  for (kv::RelocationMode mode : relocations)
    out << " stock / hit in FLOPs (" << kv::relocationModeName(mode) << ") |";
  if (withPeer)
    out << " llama-server shuffled / hit (rope-in-kernel) | llama-server "
           "shuffled / stock |";
  out << "\n|---:|";
  for (size_t i = 0; i < 3 * relocations.size() + (withPeer ? 2 : 0); ++i)
    out << "---:|";
  out << "\n";
  std::vector<std::string> verdicts;
  for (int64_t docsValue : settings.documentCounts) {
    unsigned docs = unsigned(docsValue);
    double stock = medianOf(rows, docs, "prefix-warm-shuffled");
    out << "| " << docs << " |";
    for (kv::RelocationMode mode : relocations) {
      double hit = medianOf(
          rows, docs, std::string("span-hit-") + kv::relocationModeName(mode));
      out << " " << formatRatio(stock, hit) << " |";
      if (docs >= 8 && hit > 0)
        verdicts.push_back(
            printed("hit ≥ 10× faster than stock at %u docs (%s): %s (%.1f×)",
                    docs, kv::relocationModeName(mode),
                    stock / hit >= 10 ? "met" : "NOT met", stock / hit));
    }
    for (kv::RelocationMode mode : relocations) {
      double miss = medianOf(
          rows, docs, std::string("span-miss-") + kv::relocationModeName(mode));
      out << " " << formatRatio(stock, miss) << " |";
      if (docs >= 4 && miss > 0)
        verdicts.push_back(
            printed("miss faster than stock at %u docs (%s): %s (%.2f×)", docs,
                    kv::relocationModeName(mode),
                    stock / miss > 1 ? "met" : "NOT met", stock / miss));
    }
    // The layers' work of stock over the hit's: the ratio a hit reaches
    // at the stock prefill's FLOP rate.
    const double stockWork = medianOf(rows, docs, "prefix-warm-shuffled",
                                      &PhaseBreakdown::layerGflop);
    for (kv::RelocationMode mode : relocations)
      out << " "
          << formatRatio(stockWork, medianOf(rows, docs,
                                             std::string("span-hit-") +
                                                 kv::relocationModeName(mode),
                                             &PhaseBreakdown::layerGflop))
          << " |";
    if (withPeer) {
      double peerShuffled = medianOf(rows, docs, "llama-server-shuffled");
      out << " "
          << formatRatio(peerShuffled,
                         medianOf(rows, docs, "span-hit-rope-in-kernel"))
          << " | " << formatRatio(peerShuffled, stock) << " |";
    }
    out << "\n";
  }
  out << "\nGoals:\n\n";
  for (const std::string &verdict : verdicts)
    out << "- " << verdict << "\n";
}

/// The per-mode table: each span accuracy mode's miss and hit beside stock,
/// with what its repair recomputed.
void writeModeTable(llvm::raw_ostream &out, const RagSettings &settings,
                    llvm::ArrayRef<Row> rows) {
  out << "\n## Span accuracy modes (rope-in-kernel): TTFT, ms, median\n\n"
      << "Each mode of `--set modes` on its own span executor, side by side "
         "with the rows above (miss: order A cold; hit: order B warm), "
         "after the default span mode (`"
      << kv::spanModeName(settings.defaultSpan)
      << "`: the span-*-rope-in-kernel rows). Accuracy per mode: `spanc "
         "bench accuracy`; both joined: bench/accuracy/pareto.py. "
         "**repaired**: span tokens a blend or guided repair recomputed "
         "through every layer on the hit (median; not in the reuse table's "
         "`computed`); "
         "**probe**: a guided repair's first pass, part of the hit's "
         "TTFT.\n\n"
      << "| docs | mode | miss | hit | stock / hit | repaired on the hit "
         "| probe ms |\n|---:|---|---:|---:|---:|---:|---:|\n";
  // The default mode's row leads, whether or not `modes` names it.
  std::vector<kv::SpanOptions> tableModes = {settings.defaultSpan};
  for (const kv::SpanOptions &mode : settings.spanModes)
    if (!settings.isAlias(mode))
      tableModes.push_back(mode);
  for (int64_t docsValue : settings.documentCounts) {
    unsigned docs = unsigned(docsValue);
    double stock = medianOf(rows, docs, "prefix-warm-shuffled");
    out << "| " << docs << " | stock prefix caching (shuffled repeat) | — | "
        << printed("%.0f", stock) << " | 1.0× | — | — |\n";
    for (const kv::SpanOptions &mode : tableModes) {
      std::string miss = settings.modeConfig("miss", mode),
                  hit = settings.modeConfig("hit", mode);
      double missMs = medianOf(rows, docs, miss),
             hitMs = medianOf(rows, docs, hit);
      double repaired = medianOf(rows, docs, hit, &Row::repairedTokens);
      double probe = medianOf(rows, docs, hit, &Row::probeMs);
      out << "| " << docs << " | " << kv::spanModeName(mode) << " | "
          << (missMs > 0 ? printed("%.0f", missMs) : std::string("—")) << " | "
          << (hitMs > 0 ? printed("%.1f", hitMs) : std::string("—")) << " | "
          << formatRatio(stock, hitMs) << " | "
          << (repaired > 0 ? printed("%.0f", repaired) : std::string("—"))
          << " | " << (probe > 0 ? printed("%.0f", probe) : std::string("—"))
          << " |\n";
    }
  }
}

/// Tokens reused, computed and relocated per configuration, from the first
/// repetition (they do not vary between repetitions).
void writeReuseTable(llvm::raw_ostream &out, const BenchArgs &args,
                     const RagSettings &settings, llvm::ArrayRef<Row> rows,
                     llvm::ArrayRef<std::string> configs) {
  out << "\n## Reuse per call (tokens, first repetition)\n\n"
      << "| docs | config | prompt | reused | computed | relocated |\n"
      << "|---:|---|---:|---:|---:|---:|\n";
  for (int64_t docsValue : settings.documentCounts)
    for (const std::string &config : configs)
      if (const Row *row = firstRow(rows, unsigned(docsValue), config))
        out << "| " << row->docs << " | " << config << " | " << row->prompt
            << " | " << row->reused << " | " << row->computed << " | "
            << row->relocated << " |\n";
  out << "\nRaw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/rag/plot.py).\n";
}

/// Where each span hit's time went, by phase (medians per document count):
/// the default mode's first, then each mode's.
void writeBreakdowns(llvm::raw_ostream &out, const RagSettings &settings,
                     llvm::ArrayRef<Row> rows) {
  out << "\n## Where a hit's time goes (ms, median)\n\nEach measured call "
         "timed by phase (sched::PhaseProfile, `spanc run "
         "--stats=detailed`): compile + plan happen before the call (not in "
         "its TTFT); the forward pass's ops are summed over its layers.\n";
  std::vector<std::string> configs;
  for (kv::RelocationMode mode : settings.relocations)
    configs.push_back(std::string("span-hit-") + kv::relocationModeName(mode));
  for (const kv::SpanOptions &mode : settings.spanModes)
    if (!settings.isAlias(mode))
      configs.push_back(settings.modeConfig("hit", mode));
  configs.push_back("span-miss-rope-in-kernel");
  configs.push_back("prefix-warm-shuffled");
  for (const std::string &config : configs) {
    std::vector<std::pair<unsigned, std::pair<double, PhaseBreakdown>>> entries;
    for (const Row &row : rows)
      if (row.config == config)
        entries.push_back({row.docs, {row.ttftMs, row.breakdown}});
    writeBreakdownTable(out, config, entries);
  }
}

/// rag.md: setup, the TTFT table, the headline ratios, the per-mode table,
/// the breakdowns and the reuse table.
std::string ragMarkdown(const BenchArgs &args, const RagSettings &settings,
                        const ModelSession &model, const PeerColumn &peerColumn,
                        const RagMeasurements &measured) {
  const bool withPeer = peerColumn.peer != nullptr;
  std::vector<std::string> configs = {"prefix-cold", "prefix-warm-shuffled"};
  for (kv::RelocationMode mode : settings.relocations)
    configs.push_back(std::string("span-miss-") + kv::relocationModeName(mode));
  for (kv::RelocationMode mode : settings.relocations)
    configs.push_back(std::string("span-hit-") + kv::relocationModeName(mode));
  if (withPeer) {
    configs.push_back("llama-server-cold");
    configs.push_back("llama-server-shuffled");
  }
  std::string md;
  llvm::raw_string_ostream out(md);
  writeRagSetup(out, args, settings, model, peerColumn, measured);
  writeTtftTable(out, settings, measured.rows, configs, withPeer);
  writeHeadlineRatios(out, settings, measured.rows, withPeer);
  if (!settings.spanModes.empty()) {
    writeModeTable(out, settings, measured.rows);
    // The modes' rows join the reuse table (not the TTFT table: the mode
    // table has them).
    for (const kv::SpanOptions &mode : settings.spanModes)
      if (!settings.isAlias(mode)) {
        configs.push_back(settings.modeConfig("miss", mode));
        configs.push_back(settings.modeConfig("hit", mode));
      }
  }
  writeBreakdowns(out, settings, measured.rows);
  writeReuseTable(out, args, settings, measured.rows, configs);
  out.flush();
  return md;
}

llvm::Error runRag(const BenchArgs &args) {
  auto settings = readRagSettings(args);
  if (!settings)
    return settings.takeError();
  auto session = ModelSession::load(args);
  if (!session)
    return session.takeError();
  ModelSession &model = **session;
  auto executors = makeRagExecutors(model, *settings);
  if (!executors)
    return executors.takeError();
  auto peerColumn = startPeerColumn(args, model, *settings);
  if (!peerColumn)
    return peerColumn.takeError();
  auto measured =
      measureAll(args, *settings, model, *executors, peerColumn->peer.get());
  if (!measured)
    return measured.takeError();
  if (auto error =
          writeTextFile(resultPath(args, ".tsv"), ragTsv(measured->rows)))
    return error;
  return finishResults(
      args, ragMarkdown(args, *settings, model, *peerColumn, *measured));
}

BenchRegistration registration{
    {"rag",
     "RAG TTFT: stock prefix cache vs span miss/hit (and llama-server), "
     "1-15 documents of 512 tokens",
     "  docs=1,2,4,8,15: document counts (--quick: 1,4)\n"
     "  doc-tokens=512: tokens per document (--quick: 128)\n"
     "  reps=10: repetitions per document count, a list per count (the "
     "last value repeats; -r N: all N)\n"
     "  peer-reps=3,3,3,2,1: llama-server repetitions per document count "
     "(its first ones)\n"
     "  budget-s=1200: start no repetition after this many seconds (0: no "
     "limit)\n"
     "  cache-tokens=20480: KV cache of each executor, in tokens\n"
     "  step-tokens=512: token budget of one scheduler step\n"
     "  relocations=rope-in-kernel: span relocation strategies, comma "
     "separated (--quick: both)\n"
     "  peer=auto|on|off: the llama-server column (auto: when the peer "
     "binary is built)\n"
     "  modes=prefix,isolated,prefix+recompute1,isolated+recompute1: span "
     "accuracy modes (`spanc bench accuracy`), rows span-miss-MODE and "
     "span-hit-MODE, rope-in-kernel (none: no extra rows)\n",
     runRag}};

} // namespace

} // namespace spanc::bench
