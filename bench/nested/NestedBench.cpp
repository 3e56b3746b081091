//===- NestedBench.cpp - `spanc bench nested`: judge/generator TTFT -------===//
//
// The paper's nested-generation experiment: n generators (a `repeat(n)` of
// one `gen` at temperature T under a `plus`) write candidate emails for an
// applicant, then a judge `gen` reads them all. What is measured is the
// judge's TTFT (ready = when its last candidate finished → first token),
// side by side in one process:
//   stock       --cache=prefix, the default pipeline without
//               plus-distribute: the judge prompt holds the candidates'
//               texts, as a client of a prefix-caching server would send
//               them, so only the judge's system prompt can hit.
//   span-<rel>  --cache=span, the default pipeline (plus-distribute turns
//               each candidate G(x) into x ⋈ G(x), so the judge's spans are
//               exactly the blocks the generators left in the cache).
// Every repetition uses a new applicant, judge prompt and seed, so nothing
// is warm from before. Temperature 0 makes the n samples identical: the
// lowering merges them into one call whose output the judge reads n times.
//
//===----------------------------------------------------------------------===//

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/RandomText.h"
#include "bench/common/Report.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <chrono>

namespace spanc::bench {

namespace {

std::string nestedSource(int64_t fanOut, double temperature,
                         int64_t innerTokens, uint64_t seed,
                         llvm::StringRef applicant) {
  std::string source;
  source += "query judge {\n  gen(max_tokens = 1, temperature = 0) {\n"
            "    system " +
            spanLiteral("You are a judge (panel " + std::to_string(seed) +
                        "). Pick the best email. Answer with its number.") +
            "\n    plus {\n      repeat(" + std::to_string(fanOut) +
            ") {\n        gen(max_tokens = " + std::to_string(innerTokens) +
            ", temperature = " + printed("%.2f", temperature) +
            ", seed = " + std::to_string(seed % 1000000) +
            ") {\n          system \"You write short introductory emails.\"\n"
            "          user " +
            spanLiteral("Write an email introducing this applicant: " +
                        applicant.str()) +
            "\n        }\n      }\n    }\n"
            "    user \"Which email is best? Answer with its number.\"\n"
            "  }\n}\n";
  return source;
}

struct Row {
  int64_t fanOut = 0;
  double temperature = 0;
  unsigned rep = 0;
  std::string config;
  double ttftMs = 0;
  uint32_t calls = 0, prompt = 0, reused = 0, computed = 0, relocated = 0;
  /// Wall time of the whole plan (generators + judge).
  double totalMs = 0;
};

llvm::Expected<std::vector<double>> parseTemperatures(llvm::StringRef text) {
  std::vector<double> values;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  text.split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    double value = 0;
    if (part.trim().getAsDouble(value) || value < 0 || value > 2)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--set temperatures=%s: expected numbers in 0..2, comma separated",
          text.str().c_str());
    values.push_back(value);
  }
  if (values.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--set temperatures=: give at least one");
  return values;
}

llvm::Error runNested(const BenchArgs &args) {
  auto fanOuts = args.intListSetting(
      "fan-out", args.quick ? llvm::ArrayRef<int64_t>{1, 4}
                            : llvm::ArrayRef<int64_t>{1, 2, 4, 8, 16, 24});
  if (!fanOuts)
    return fanOuts.takeError();
  for (int64_t fanOut : *fanOuts)
    if (fanOut < 1 || fanOut > 64)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--set fan-out: %lld is not in 1..64",
                                     (long long)fanOut);
  auto temperatures = parseTemperatures(
      args.setting("temperatures", args.quick ? "0,1.0" : "0,0.5,1.0"));
  if (!temperatures)
    return temperatures.takeError();
  auto innerTokens = args.intSetting("inner-tokens", args.quick ? 8 : 16);
  if (!innerTokens)
    return innerTokens.takeError();
  auto applicantTokens =
      args.intSetting("applicant-tokens", args.quick ? 32 : 64);
  if (!applicantTokens)
    return applicantTokens.takeError();
  if (*innerTokens < 1 || *innerTokens > 512 || *applicantTokens < 8 ||
      *applicantTokens > 1024)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--set inner-tokens must be 1..512 and applicant-tokens 8..1024");
  std::vector<kv::RelocationMode> relocations = {
      kv::RelocationMode::RopeInKernel};
  std::string relocationSetting =
      args.setting("relocations", "rope-in-kernel,rerope");
  if (relocationSetting == "rope-in-kernel,rerope")
    relocations.push_back(kv::RelocationMode::Rerope);
  else if (relocationSetting == "rerope")
    relocations = {kv::RelocationMode::Rerope};
  else if (relocationSetting != "rope-in-kernel")
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--set relocations=%s: expected rope-in-kernel, rerope or both "
        "(rope-in-kernel,rerope)",
        relocationSetting.c_str());
  const int repetitions = args.repetitionsOr(10, 1);
  // No new repetition starts after this many seconds: a shared machine's
  // load decides how many fit (nested.md says how many ran).
  auto budgetSeconds = args.intSetting("budget-s", args.quick ? 0 : 420);
  if (!budgetSeconds)
    return budgetSeconds.takeError();

  auto session = ModelSession::load(args);
  if (!session)
    return session.takeError();
  ModelSession &model = **session;
  // Room for the largest fan-out's generators and the judge, with margin:
  // nothing is evicted within a repetition.
  const int64_t cacheTokens = 32768;
  auto stock = model.makeExecutor(
      kv::CacheMode::Prefix, kv::RelocationMode::RopeInKernel, cacheTokens);
  if (!stock)
    return stock.takeError();
  std::vector<std::unique_ptr<sched::Executor>> span;
  for (kv::RelocationMode mode : relocations) {
    auto executor = model.makeExecutor(kv::CacheMode::Span, mode, cacheTokens);
    if (!executor)
      return executor.takeError();
    span.push_back(std::move(*executor));
  }

  std::vector<Row> rows;
  auto measure = [&](sched::Executor &executor, const plan::Plan &plan,
                     Row row) -> llvm::Error {
    auto begin = std::chrono::steady_clock::now();
    auto outcomes = model.run(executor, plan);
    if (!outcomes)
      return outcomes.takeError();
    row.totalMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - begin)
                      .count();
    // Calls are in topological order: the judge, which depends on every
    // generator, is the last.
    const sched::CallStats &stats = outcomes->back().stats;
    row.calls = uint32_t(outcomes->size());
    row.ttftMs = 1e3 * stats.ttftSeconds;
    row.prompt = stats.promptTokens;
    row.reused = stats.reusedTokens;
    row.computed = stats.computedTokens;
    row.relocated = stats.relocatedTokens;
    llvm::errs() << printed(
        "nested: fan-out %2lld T %.1f rep %u %-20s judge ttft %8.1f ms "
        "prompt %5u reused %5u computed %5u relocated %5u (%u calls, "
        "%.0f ms)\n",
        (long long)row.fanOut, row.temperature, row.rep, row.config.c_str(),
        row.ttftMs, row.prompt, row.reused, row.computed, row.relocated,
        row.calls, row.totalMs);
    rows.push_back(std::move(row));
    return llvm::Error::success();
  };

  LoadSampler load;
  auto started = std::chrono::steady_clock::now();
  // Warm-up: first KV writes and weight repacking outside the figures.
  {
    auto plan = model.compile(
        nestedSource(2, 1.0, 4, args.seed * 31 + 7,
                     makeDocument(model.tokenizer(), args.seed * 31 + 7, 16)));
    if (!plan)
      return plan.takeError();
    if (auto outcomes = model.run(**stock, *plan); !outcomes)
      return outcomes.takeError();
    for (auto &executor : span)
      if (auto outcomes = model.run(*executor, *plan); !outcomes)
        return outcomes.takeError();
  }
  // Repetitions outermost, so a load spike spreads over every point.
  int repetitionsRun = 0;
  for (int rep = 0; rep < repetitions; ++rep, ++repetitionsRun) {
    if (rep > 0 && *budgetSeconds > 0 &&
        std::chrono::steady_clock::now() - started >
            std::chrono::seconds(*budgetSeconds))
      break;
    for (double temperature : *temperatures)
      for (int64_t fanOut : *fanOuts) {
        uint64_t seed = ((args.seed * 1000003 + uint64_t(fanOut)) * 10 +
                         uint64_t(temperature * 4)) *
                            1000 +
                        uint64_t(rep);
        std::string applicant =
            makeDocument(model.tokenizer(), seed, size_t(*applicantTokens));
        std::string source =
            nestedSource(fanOut, temperature, *innerTokens, seed, applicant);
        auto stockPlan = model.compileSkipping(source, {"plus-distribute"});
        if (!stockPlan)
          return stockPlan.takeError();
        auto spanPlan = model.compile(source);
        if (!spanPlan)
          return spanPlan.takeError();
        Row base;
        base.fanOut = fanOut;
        base.temperature = temperature;
        base.rep = unsigned(rep);
        base.config = "stock";
        if (auto error = measure(**stock, *stockPlan, base))
          return error;
        for (size_t r = 0; r < span.size(); ++r) {
          base.config =
              std::string("span-") + kv::relocationModeName(relocations[r]);
          if (auto error = measure(*span[r], *spanPlan, base))
            return error;
        }
      }
  }
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::string loadLine = load.stopAndDescribe();

  // --- nested.tsv ------------------------------------------------------
  std::string tsv = "fan_out\ttemperature\trep\tconfig\tjudge_ttft_ms\t"
                    "calls\tprompt\treused\tcomputed\trelocated\ttotal_ms\n";
  for (const Row &row : rows)
    tsv += printed("%lld\t%.2f\t%u\t%s\t%.3f\t%u\t%u\t%u\t%u\t%u\t%.1f\n",
                   (long long)row.fanOut, row.temperature, row.rep,
                   row.config.c_str(), row.ttftMs, row.calls, row.prompt,
                   row.reused, row.computed, row.relocated, row.totalMs);
  if (auto error = writeTextFile(resultPath(args, ".tsv"), tsv))
    return error;

  // --- nested.md -------------------------------------------------------
  std::vector<std::string> configs = {"stock"};
  for (kv::RelocationMode mode : relocations)
    configs.push_back(std::string("span-") + kv::relocationModeName(mode));
  auto select = [&](int64_t fanOut, double temperature,
                    llvm::StringRef config) {
    std::vector<const Row *> selected;
    for (const Row &row : rows)
      if (row.fanOut == fanOut && row.temperature == temperature &&
          row.config == config)
        selected.push_back(&row);
    return selected;
  };
  auto ttfts = [&](int64_t fanOut, double temperature, llvm::StringRef config) {
    std::vector<double> values;
    for (const Row *row : select(fanOut, temperature, config))
      values.push_back(row->ttftMs);
    return values;
  };
  auto medianOf = [](const std::vector<const Row *> &selected,
                     uint32_t Row::*field) {
    std::vector<double> values;
    for (const Row *row : selected)
      values.push_back(double(row->*field));
    return values.empty() ? 0.0 : summarize(values).median;
  };

  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# Nested generation (judge/generator): judge TTFT, stock vs span\n\n"
      << "Generated by `spanc bench nested" << commandLine(args)
      << "` (bench/nested/NestedBench.cpp) on " << timestampNow() << " in "
      << printed("%.0f", elapsed) << " s.\n\n## Setup\n\n"
      << "- Model: " << model.describeModel() << ", default GEMMs, "
      << omp_get_max_threads() << " threads.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine
      << " (a shared machine: compare columns, which ran interleaved, not "
         "runs).\n"
      << "- Program: `judge { gen(max_tokens = 1) { system …; plus { "
         "repeat(n) { gen(max_tokens = "
      << *innerTokens
      << ", temperature = T, seed) { system …; user <applicant> } } }; "
         "user … } }` with a new applicant of "
      << *applicantTokens
      << " random-English tokens, judge prompt and seed per repetition. "
         "TTFT is the judge call's: from when its last generator finished "
         "to its first token.\n"
      << "- `stock`: --cache=prefix, default pipeline without "
         "plus-distribute (the judge prompt holds the candidate texts, as a "
         "client of a prefix-caching server sends them: only the judge's "
         "system prompt can hit). `span-*`: --cache=span, default pipeline "
         "(plus-distribute makes each candidate the span x ⋈ G(x), so the "
         "judge reuses the generators' blocks at any position); "
         "rope-in-kernel rotates K inside attention, rerope moves the "
         "reused blocks' K to their new positions first.\n"
      << "- Scaled for a 2-core CPU: generators write " << *innerTokens
      << " tokens (the paper's emails are longer), the judge's max_tokens "
         "is 1 (TTFT only), "
      << repetitionsRun << " repetitions per point"
      << (repetitionsRun < repetitions
              ? printed(" (of %d planned: no repetition starts after %lld "
                        "s)",
                        repetitions, (long long)*budgetSeconds)
              : std::string())
      << " (so p99 is about the worst of them). KV caches "
         "of "
      << cacheTokens << " tokens: nothing is evicted within a repetition.\n\n"
      << "## Judge TTFT (ms): median [min, max] and p90 / p99\n\n"
      << "| T | fan-out | judge prompt (stock / span) |";
  for (const std::string &config : configs)
    out << " " << config << " | p90 / p99 |";
  out << " stock / span (rope-in-kernel) |\n|---:|---:|---:|";
  for (size_t i = 0; i < configs.size(); ++i)
    out << "---:|---:|";
  out << "---:|\n";
  for (double temperature : *temperatures)
    for (int64_t fanOut : *fanOuts) {
      out << printed("| %.1f | %lld | ", temperature, (long long)fanOut)
          << printed(
                 "%.0f / %.0f",
                 medianOf(select(fanOut, temperature, "stock"), &Row::prompt),
                 medianOf(select(fanOut, temperature, configs[1]),
                          &Row::prompt))
          << " |";
      for (const std::string &config : configs) {
        std::vector<double> values = ttfts(fanOut, temperature, config);
        if (values.empty()) {
          out << " — | — |";
          continue;
        }
        Summary summary = summarize(values);
        out << " " << formatSpread(summary, 0) << " | "
            << printed("%.0f / %.0f", summary.p90, summary.p99) << " |";
      }
      std::vector<double> stockValues = ttfts(fanOut, temperature, "stock");
      std::vector<double> spanValues = ttfts(fanOut, temperature, configs[1]);
      out << " "
          << formatRatio(stockValues.empty() ? 0
                                             : summarize(stockValues).median,
                         spanValues.empty() ? 0 : summarize(spanValues).median)
          << " |\n";
    }
  out << "\n## Reuse and relocation in the judge call (median tokens)\n\n"
      << "Relocated = reused tokens whose K had to be re-rotated to a new "
         "position (rerope); rope-in-kernel relocates nothing and pays its "
         "rotation inside attention. The relocation overhead in time is "
         "the judge TTFT of span-rerope minus span-rope-in-kernel (same "
         "blocks hit, ± noise).\n\n"
      << "| T | fan-out | config | prompt | reused | computed | relocated | "
         "relocation overhead (ms, median) |\n"
      << "|---:|---:|---|---:|---:|---:|---:|---:|\n";
  for (double temperature : *temperatures)
    for (int64_t fanOut : *fanOuts)
      for (const std::string &config : configs) {
        std::vector<const Row *> selected = select(fanOut, temperature, config);
        if (selected.empty())
          continue;
        std::string overhead = "";
        if (config == "span-rerope") {
          std::vector<double> rerope = ttfts(fanOut, temperature, config);
          std::vector<double> inKernel =
              ttfts(fanOut, temperature, "span-rope-in-kernel");
          if (!rerope.empty() && !inKernel.empty())
            overhead = printed("%+.0f", summarize(rerope).median -
                                            summarize(inKernel).median);
        }
        out << printed("| %.1f | %lld | ", temperature, (long long)fanOut)
            << config << " | "
            << printed("%.0f | %.0f | %.0f | %.0f | ",
                       medianOf(selected, &Row::prompt),
                       medianOf(selected, &Row::reused),
                       medianOf(selected, &Row::computed),
                       medianOf(selected, &Row::relocated))
            << overhead << " |\n";
      }
  out << "\n## Against the paper\n\n"
      << "The paper (vLLM, GPU, long emails) reports no gain at temperature "
         "0 (a prefix cache also hits), 7–32% at fan-out 1 and 12–13× at "
         "fan-out 24. Ours, stock / span (rope-in-kernel) median judge "
         "TTFT:\n\n";
  for (double temperature : *temperatures) {
    out << printed("- T = %.1f:", temperature);
    for (int64_t fanOut : *fanOuts) {
      std::vector<double> stockValues = ttfts(fanOut, temperature, "stock");
      std::vector<double> spanValues = ttfts(fanOut, temperature, configs[1]);
      out << printed(" n=%lld ", (long long)fanOut)
          << formatRatio(stockValues.empty() ? 0
                                             : summarize(stockValues).median,
                         spanValues.empty() ? 0 : summarize(spanValues).median)
          << (fanOut == fanOuts->back() ? "" : ",");
    }
    out << "\n";
  }
  out << "\nRaw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/nested/plot.py).\n";
  out.flush();

  return finishResults(args, std::move(md));
}

BenchRegistration registration{
    {"nested",
     "judge/generator: judge TTFT, stock vs span (plus-distribute), by "
     "fan-out and temperature",
     "  fan-out=1,2,4,8,16,24: generators per judge (--quick: 1,4)\n"
     "  temperatures=0,0.5,1.0: generator temperature (--quick: 0,1.0)\n"
     "  inner-tokens=16: tokens each generator writes (--quick: 8)\n"
     "  applicant-tokens=64: the generators' shared input (--quick: 32)\n"
     "  relocations=rope-in-kernel,rerope: span relocation strategies\n"
     "  budget-s=420: start no repetition after this many seconds (0: no "
     "limit)\n",
     runNested}};

} // namespace

} // namespace spanc::bench
