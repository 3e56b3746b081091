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
};

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

llvm::Error runRag(const BenchArgs &args) {
  auto documentCounts = args.intListSetting(
      "docs", args.quick ? llvm::ArrayRef<int64_t>{1, 4}
                         : llvm::ArrayRef<int64_t>{1, 2, 4, 8, 15});
  if (!documentCounts)
    return documentCounts.takeError();
  auto documentTokens = args.intSetting("doc-tokens", args.quick ? 128 : 512);
  if (!documentTokens)
    return documentTokens.takeError();
  // Repetitions per document count (the last value repeats); -r N sets
  // every count to N.
  auto repetitionList =
      args.intListSetting("reps", args.quick ? llvm::ArrayRef<int64_t>{1}
                                             : llvm::ArrayRef<int64_t>{10});
  if (!repetitionList)
    return repetitionList.takeError();
  // The peer's own repetitions per count: llama-server prefills a long
  // prompt 2-3x slower than our stock path on two cores (~50 s at 15
  // documents, twice per repetition), so it runs the first few only.
  auto peerRepetitionList = args.intListSetting(
      "peer-reps", args.quick ? llvm::ArrayRef<int64_t>{1}
                              : llvm::ArrayRef<int64_t>{3, 3, 3, 2, 1});
  if (!peerRepetitionList)
    return peerRepetitionList.takeError();
  // No new repetition starts after this many seconds (a shared machine's
  // load decides how many fit; rag.md says how many ran).
  auto budgetSeconds = args.intSetting("budget-s", args.quick ? 0 : 1200);
  if (!budgetSeconds)
    return budgetSeconds.takeError();
  // The defaults hold two 8k contexts; the paper's scale (32 documents of
  // 2857 tokens on a GPU, bench/gpu.sh) needs more of both.
  auto cacheSetting = args.intSetting("cache-tokens", 20480);
  if (!cacheSetting)
    return cacheSetting.takeError();
  auto stepSetting = args.intSetting("step-tokens", 512);
  if (!stepSetting)
    return stepSetting.takeError();
  auto relocations = parseRelocations(args.setting(
      "relocations", args.quick ? "rope-in-kernel,rerope" : "rope-in-kernel"));
  if (!relocations)
    return relocations.takeError();
  // The span accuracy modes beside stock (issue 14): each its own executor,
  // rope-in-kernel only, to keep the run's time.
  std::vector<kv::SpanOptions> spanModes;
  {
    std::string text = args.setting(
        "modes", "prefix,isolated,prefix+recompute1,isolated+recompute1");
    llvm::SmallVector<llvm::StringRef, 4> names;
    if (text != "none")
      llvm::StringRef(text).split(names, ',', -1, false);
    for (llvm::StringRef name : names) {
      auto mode = kv::parseSpanMode(name.trim());
      if (!mode)
        return mode.takeError();
      spanModes.push_back(*mode);
    }
  }
  std::string peerSetting = args.setting("peer", "auto");
  if (peerSetting != "auto" && peerSetting != "on" && peerSetting != "off")
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set peer=%s: expected auto, on or off",
                                   peerSetting.c_str());
  for (int64_t docs : *documentCounts)
    if (docs < 1 || docs > 64)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--set docs: %lld is not in 1..64",
                                     (long long)docs);
  if (*documentTokens < 16 || *documentTokens > 4096)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set doc-tokens: expected 16..4096");
  for (int64_t value : *repetitionList)
    if (value < 1)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--set reps: repetitions must be >= 1");
  for (int64_t value : *peerRepetitionList)
    if (value < 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--set peer-reps: repetitions must be >= 0");
  auto valueFor = [&](llvm::ArrayRef<int64_t> list, int64_t docs) {
    size_t index =
        size_t(llvm::find(*documentCounts, docs) - documentCounts->begin());
    return int(list[std::min(index, list.size() - 1)]);
  };
  auto repetitionsFor = [&](int64_t docs) {
    return args.repetitions > 0 ? args.repetitions
                                : valueFor(*repetitionList, docs);
  };
  auto peerRepetitionsFor = [&](int64_t docs) {
    return std::min(repetitionsFor(docs), valueFor(*peerRepetitionList, docs));
  };

  auto session = ModelSession::load(args.modelPath, args.device);
  if (!session)
    return session.takeError();
  ModelSession &model = **session;
  const model::Tokenizer &tokenizer = model.tokenizer();

  // One executor per configuration. The cache holds two 8k contexts by
  // default, so the warm run of a repetition always finds what its cold
  // run left.
  const int64_t cacheTokens = *cacheSetting;
  const int64_t stepTokens = *stepSetting;
  auto executorOptions = [&](kv::CacheMode cacheMode,
                             kv::RelocationMode relocation) {
    sched::ExecutorOptions options;
    options.cacheMode = cacheMode;
    options.relocationMode = relocation;
    options.cacheTokens = cacheTokens;
    options.stepTokenBudget = stepTokens;
    return options;
  };
  auto prefix = model.makeExecutor(
      executorOptions(kv::CacheMode::Prefix, kv::RelocationMode::RopeInKernel));
  if (!prefix)
    return prefix.takeError();
  std::vector<std::unique_ptr<sched::Executor>> span;
  for (kv::RelocationMode mode : *relocations) {
    auto executor =
        model.makeExecutor(executorOptions(kv::CacheMode::Span, mode));
    if (!executor)
      return executor.takeError();
    span.push_back(std::move(*executor));
  }
  // The default span options with rope-in-kernel are what the
  // span-*-rope-in-kernel rows measure already: such a mode reads those
  // rows instead of running the same executor twice.
  const kv::SpanOptions defaultSpan;
  bool ropeInKernelRuns =
      llvm::is_contained(*relocations, kv::RelocationMode::RopeInKernel);
  // A mode's name spells every setting (blend and scaling included), so
  // equal names are the same mode.
  auto isAlias = [&](const kv::SpanOptions &mode) {
    return ropeInKernelRuns &&
           kv::spanModeName(mode) == kv::spanModeName(defaultSpan);
  };
  /// The rows of a mode: "span-hit-isolated", or "span-hit-rope-in-kernel"
  /// for the default mode.
  auto modeConfig = [&](const char *kind, const kv::SpanOptions &mode) {
    return std::string("span-") + kind + "-" +
           (isAlias(mode) ? std::string("rope-in-kernel")
                          : kv::spanModeName(mode));
  };
  std::vector<std::unique_ptr<sched::Executor>> modeExecutors;
  for (const kv::SpanOptions &mode : spanModes) {
    if (isAlias(mode)) {
      modeExecutors.push_back(nullptr);
      continue;
    }
    sched::ExecutorOptions options =
        executorOptions(kv::CacheMode::Span, kv::RelocationMode::RopeInKernel);
    options.spanOptions = mode;
    auto executor = model.makeExecutor(options);
    if (!executor)
      return executor.takeError();
    modeExecutors.push_back(std::move(*executor));
  }
  std::unique_ptr<RagPeer> peer;
  std::string peerNote;
  if (peerSetting != "off") {
    auto started = RagPeer::start(args, model);
    if (!started) {
      peerNote = llvm::toString(started.takeError());
      if (peerSetting == "on")
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "the llama-server peer: %s",
                                       peerNote.c_str());
    } else
      peer = std::move(*started);
  }

  const std::string question = "Which document mentions the river first?";
  std::vector<Row> rows;
  auto measure = [&](sched::Executor &executor, const plan::Plan &plan,
                     unsigned docs, unsigned rep,
                     std::string config) -> llvm::Error {
    auto outcomes = model.run(executor, plan);
    if (!outcomes)
      return outcomes.takeError();
    const sched::CallStats &stats = outcomes->back().stats;
    Row row{docs,
            rep,
            std::move(config),
            1e3 * stats.ttftSeconds,
            stats.promptTokens,
            stats.reusedTokens,
            stats.computedTokens,
            stats.relocatedTokens,
            double(stats.blendedTokens),
            1e3 * stats.probeSeconds};
    llvm::errs() << llvm::format(
        "rag: docs %2u rep %2u %-24s ttft %9.1f ms prompt %5u reused %5u "
        "computed %5u relocated %5u repaired %5.0f probe %6.1f ms\n",
        docs, rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
        row.computed, row.relocated, row.repairedTokens, row.probeMs);
    rows.push_back(std::move(row));
    return llvm::Error::success();
  };

  LoadSampler load;
  auto started = std::chrono::steady_clock::now();
  // Touch each executor once (page faults of the first KV writes, lazy
  // weight repacking), so the first repetition is not an outlier.
  {
    std::vector<std::string> documents = {
        makeDocument(tokenizer, args.seed * 7919 + 999999, 64)};
    auto plan = model.compile(ragSource(documents, {0}, "Warm-up.", question));
    if (!plan)
      return plan.takeError();
    if (auto outcomes = model.run(**prefix, *plan); !outcomes)
      return outcomes.takeError();
    for (auto &executor : span)
      if (auto outcomes = model.run(*executor, *plan); !outcomes)
        return outcomes.takeError();
    for (auto &executor : modeExecutors)
      if (executor)
        if (auto outcomes = model.run(*executor, *plan); !outcomes)
          return outcomes.takeError();
  }

  int rounds = 0;
  for (int64_t docs : *documentCounts)
    rounds = std::max(rounds, repetitionsFor(docs));
  // Round-robin over document counts, so an interrupted run still has a
  // first repetition of every count and the load drifts over all of them.
  bool outOfTime = false;
  for (int rep = 0; rep < rounds && !outOfTime; ++rep)
    for (int64_t docsValue : *documentCounts) {
      if (rep >= repetitionsFor(docsValue))
        continue;
      if (rep > 0 && *budgetSeconds > 0 &&
          std::chrono::steady_clock::now() - started >
              std::chrono::seconds(*budgetSeconds)) {
        outOfTime = true;
        break;
      }
      unsigned docs = unsigned(docsValue);
      uint64_t seed = (args.seed * 1000003 + docs) * 1000 + rep;
      std::vector<std::string> documents;
      for (unsigned i = 0; i < docs; ++i)
        documents.push_back(
            makeDocument(tokenizer, seed * 100 + i, size_t(*documentTokens)));
      std::string system = "You answer questions about the documents. "
                           "Session " +
                           std::to_string(seed) + ".";
      std::mt19937_64 random(seed);
      std::vector<unsigned> orderA = shuffledOrder(docs, random, docs);
      std::vector<unsigned> orderB = shuffledOrder(docs, random, orderA[0]);
      auto planA =
          model.compile(ragSource(documents, orderA, system, question));
      if (!planA)
        return planA.takeError();
      auto planB =
          model.compile(ragSource(documents, orderB, system, question));
      if (!planB)
        return planB.takeError();
      if (auto error = measure(**prefix, *planA, docs, rep, "prefix-cold"))
        return error;
      if (auto error =
              measure(**prefix, *planB, docs, rep, "prefix-warm-shuffled"))
        return error;
      for (size_t r = 0; r < span.size(); ++r) {
        std::string name = kv::relocationModeName((*relocations)[r]);
        if (auto error =
                measure(*span[r], *planA, docs, rep, "span-miss-" + name))
          return error;
        if (auto error =
                measure(*span[r], *planB, docs, rep, "span-hit-" + name))
          return error;
      }
      for (size_t m = 0; m < spanModes.size(); ++m) {
        if (!modeExecutors[m])
          continue;
        if (auto error = measure(*modeExecutors[m], *planA, docs, rep,
                                 modeConfig("miss", spanModes[m])))
          return error;
        if (auto error = measure(*modeExecutors[m], *planB, docs, rep,
                                 modeConfig("hit", spanModes[m])))
          return error;
      }
      if (peer && rep < peerRepetitionsFor(docsValue)) {
        for (auto [order, config] :
             {std::pair{&*planA, "llama-server-cold"},
              std::pair{&*planB, "llama-server-shuffled"}}) {
          auto completion = peer->complete(*order);
          if (!completion)
            return completion.takeError();
          Row row{docs,
                  unsigned(rep),
                  config,
                  completion->promptMs,
                  uint32_t(completion->promptTokensTotal),
                  uint32_t(completion->promptTokensTotal -
                           completion->promptTokensComputed),
                  uint32_t(completion->promptTokensComputed),
                  0};
          llvm::errs() << llvm::format(
              "rag: docs %2u rep %2u %-24s ttft %9.1f ms prompt %5u reused "
              "%5u computed %5u\n",
              docs, rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
              row.computed);
          rows.push_back(std::move(row));
        }
      }
    }
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::string loadLine = load.stopAndDescribe();

  // --- rag.tsv ---------------------------------------------------------
  std::string tsv = "docs\trep\tconfig\tttft_ms\tprompt\treused\tcomputed\t"
                    "relocated\trepaired\tprobe_ms\n";
  for (const Row &row : rows)
    tsv +=
        printed("%u\t%u\t%s\t%.3f\t%u\t%u\t%u\t%u\t%.0f\t%.3f\n", row.docs,
                row.rep, row.config.c_str(), row.ttftMs, row.prompt, row.reused,
                row.computed, row.relocated, row.repairedTokens, row.probeMs);
  if (auto error = writeTextFile(resultPath(args, ".tsv"), tsv))
    return error;

  // --- rag.md ----------------------------------------------------------
  std::vector<std::string> configs = {"prefix-cold", "prefix-warm-shuffled"};
  for (kv::RelocationMode mode : *relocations)
    configs.push_back(std::string("span-miss-") + kv::relocationModeName(mode));
  for (kv::RelocationMode mode : *relocations)
    configs.push_back(std::string("span-hit-") + kv::relocationModeName(mode));
  if (peer) {
    configs.push_back("llama-server-cold");
    configs.push_back("llama-server-shuffled");
  }
  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# RAG microbenchmark: TTFT, stock prefix caching vs span caching"
      << (peer ? " vs llama.cpp" : "") << "\n\n"
      << "Generated by `spanc bench rag" << commandLine(args)
      << "` (bench/rag/RagBench.cpp) on " << timestampNow() << " in "
      << llvm::format("%.0f", elapsed) << " s.\n\n"
      << "## Setup\n\n"
      << "- Model: " << model.describeModel()
      << ", default GEMMs (bf16 where the CPU has it), greedy, "
         "`max_tokens = 1` (TTFT only), "
      << omp_get_max_threads() << " threads.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine
      << " (a shared machine: compare columns, which ran interleaved, "
         "not runs).\n"
      << "- Query: a short system prompt (new per repetition, so nothing is "
         "warm from before), N documents of random English words of "
      << *documentTokens
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
      << *documentTokens
      << " tokens (the paper: 2 857), at most 15 documents (15 × 512 "
         "tokens + prompt ≈ 7.7k fits the context); "
      << "repetitions planned per count: ";
  for (int64_t docs : *documentCounts)
    out << (docs == documentCounts->front() ? "" : ", ") << docs << " docs × "
        << repetitionsFor(docs);
  if (peer) {
    out << "; the peer's repetitions: ";
    for (int64_t docs : *documentCounts)
      out << (docs == documentCounts->front() ? "" : ", ") << docs << " docs × "
          << peerRepetitionsFor(docs);
    out << " (the first ones of each count: llama-server's long prefills "
           "take up to a minute each on two cores)";
  }
  if (*budgetSeconds > 0)
    out << "; no repetition starts after " << *budgetSeconds << " s"
        << (outOfTime ? " — this run hit that budget, so the counts "
                        "below are what ran"
                      : "");
  out << ". Caches of " << cacheTokens << " tokens"
      << (cacheTokens == 20480 ? " (two full contexts)" : "")
      << ", block 16, step budget " << stepTokens << ", device "
      << backend::deviceName(args.device) << ".\n";
  if (peer)
    out << "- Peer: " << peer->describe()
        << ". The same prompts rendered as raw ChatML text; "
           "`llama-server-cold` sends order A, `llama-server-shuffled` then "
           "order B (what `--cache-reuse` recovers); TTFT = the server's "
           "timings.prompt_ms, side by side in the same run.\n";
  else if (!peerNote.empty())
    out << "- Peer: no llama-server column (" << peerNote << ").\n";
  out << "\n## TTFT (ms, median [min, max])\n\n| docs | prompt tokens |";
  for (const std::string &config : configs)
    out << " " << config << " |";
  out << "\n|---:|---:|";
  for (size_t i = 0; i < configs.size(); ++i)
    out << "---:|";
  out << "\n";
  for (int64_t docsValue : *documentCounts) {
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
  for (int64_t docs : *documentCounts) {
    out << (docs == documentCounts->front() ? "" : ", ") << docs << " docs × "
        << ttftsOf(rows, unsigned(docs), "prefix-cold").size();
    if (peer)
      out << " (peer "
          << ttftsOf(rows, unsigned(docs), "llama-server-cold").size() << ")";
  }
  out << ".\n\n## Headline ratios (median TTFT)\n\n"
      << "Stock = `prefix-warm-shuffled`. Goals (issue 7): hit ≥ 10× faster "
         "than stock at 8+ documents; miss faster than stock from 4 "
         "documents on.\n\n| docs |";
  for (kv::RelocationMode mode : *relocations)
    out << " stock / hit (" << kv::relocationModeName(mode) << ") |";
  for (kv::RelocationMode mode : *relocations)
    out << " stock / miss (" << kv::relocationModeName(mode) << ") |";
  if (peer)
    out << " llama-server shuffled / hit (rope-in-kernel) | llama-server "
           "shuffled / stock |";
  out << "\n|---:|";
  for (size_t i = 0; i < 2 * relocations->size() + (peer ? 2 : 0); ++i)
    out << "---:|";
  out << "\n";
  auto medianOf = [&](unsigned docs, llvm::StringRef config) {
    std::vector<double> values = ttftsOf(rows, docs, config);
    return values.empty() ? 0.0 : summarize(values).median;
  };
  std::vector<std::string> verdicts;
  for (int64_t docsValue : *documentCounts) {
    unsigned docs = unsigned(docsValue);
    double stock = medianOf(docs, "prefix-warm-shuffled");
    out << "| " << docs << " |";
    for (kv::RelocationMode mode : *relocations) {
      double hit = medianOf(docs, std::string("span-hit-") +
                                      kv::relocationModeName(mode));
      out << " " << formatRatio(stock, hit) << " |";
      if (docs >= 8 && hit > 0)
        verdicts.push_back(
            printed("hit ≥ 10× faster than stock at %u docs (%s): %s (%.1f×)",
                    docs, kv::relocationModeName(mode),
                    stock / hit >= 10 ? "met" : "NOT met", stock / hit));
    }
    for (kv::RelocationMode mode : *relocations) {
      double miss = medianOf(docs, std::string("span-miss-") +
                                       kv::relocationModeName(mode));
      out << " " << formatRatio(stock, miss) << " |";
      if (docs >= 4 && miss > 0)
        verdicts.push_back(
            printed("miss faster than stock at %u docs (%s): %s (%.2f×)", docs,
                    kv::relocationModeName(mode),
                    stock / miss > 1 ? "met" : "NOT met", stock / miss));
    }
    if (peer) {
      double peerShuffled = medianOf(docs, "llama-server-shuffled");
      out << " "
          << formatRatio(peerShuffled,
                         medianOf(docs, "span-hit-rope-in-kernel"))
          << " | " << formatRatio(peerShuffled, stock) << " |";
    }
    out << "\n";
  }
  out << "\nGoals:\n\n";
  for (const std::string &verdict : verdicts)
    out << "- " << verdict << "\n";
  if (!spanModes.empty()) {
    out << "\n## Span accuracy modes (rope-in-kernel): TTFT, ms, median\n\n"
        << "Each mode of `--set modes` on its own span executor, side by side "
           "with the rows above (miss: order A cold; hit: order B warm), "
           "after the default span mode (`"
        << kv::spanModeName(defaultSpan)
        << "`: the span-*-rope-in-kernel rows). Accuracy per mode: `spanc "
           "bench accuracy`; both joined: bench/accuracy/pareto.py. "
           "**repaired**: span tokens a blend or guided repair recomputed "
           "through every layer on the hit (median; not in the reuse table's "
           "`computed`); "
           "**probe**: a guided repair's first pass, part of the hit's "
           "TTFT.\n\n"
        << "| docs | mode | miss | hit | stock / hit | repaired on the hit "
           "| probe ms |\n|---:|---|---:|---:|---:|---:|---:|\n";
    auto medianField = [&](unsigned docs, llvm::StringRef config,
                           double Row::*field) {
      std::vector<double> values;
      for (const Row &row : rows)
        if (row.docs == docs && row.config == config)
          values.push_back(row.*field);
      return values.empty() ? 0.0 : summarize(values).median;
    };
    // The default mode's row leads, whether or not `modes` names it.
    std::vector<kv::SpanOptions> tableModes = {defaultSpan};
    for (const kv::SpanOptions &mode : spanModes)
      if (!isAlias(mode))
        tableModes.push_back(mode);
    for (int64_t docsValue : *documentCounts) {
      unsigned docs = unsigned(docsValue);
      double stock = medianOf(docs, "prefix-warm-shuffled");
      out << "| " << docs << " | stock prefix caching (shuffled repeat) | — | "
          << printed("%.0f", stock) << " | 1.0× | — | — |\n";
      for (const kv::SpanOptions &mode : tableModes) {
        std::string miss = modeConfig("miss", mode),
                    hit = modeConfig("hit", mode);
        double missMs = medianOf(docs, miss), hitMs = medianOf(docs, hit);
        double repaired = medianField(docs, hit, &Row::repairedTokens);
        double probe = medianField(docs, hit, &Row::probeMs);
        out << "| " << docs << " | " << kv::spanModeName(mode) << " | "
            << (missMs > 0 ? printed("%.0f", missMs) : std::string("—"))
            << " | " << (hitMs > 0 ? printed("%.1f", hitMs) : std::string("—"))
            << " | " << formatRatio(stock, hitMs) << " | "
            << (repaired > 0 ? printed("%.0f", repaired) : std::string("—"))
            << " | " << (probe > 0 ? printed("%.0f", probe) : std::string("—"))
            << " |\n";
      }
    }
    for (const kv::SpanOptions &mode : spanModes)
      if (!isAlias(mode)) {
        configs.push_back(modeConfig("miss", mode));
        configs.push_back(modeConfig("hit", mode));
      }
  }
  out << "\n## Reuse per call (tokens, first repetition)\n\n"
      << "| docs | config | prompt | reused | computed | relocated |\n"
      << "|---:|---|---:|---:|---:|---:|\n";
  for (int64_t docsValue : *documentCounts)
    for (const std::string &config : configs)
      if (const Row *row = firstRow(rows, unsigned(docsValue), config))
        out << "| " << row->docs << " | " << config << " | " << row->prompt
            << " | " << row->reused << " | " << row->computed << " | "
            << row->relocated << " |\n";
  out << "\nRaw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/rag/plot.py).\n";
  out.flush();

  return finishResults(args, std::move(md));
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
