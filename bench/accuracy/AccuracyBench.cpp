//===- AccuracyBench.cpp - Planted-fact QA: causal vs span attention ------===//
//
// The accuracy audit (issue 7 item 5): what isolating spans costs in
// answers. A context is `docs` documents of seeded random hay (RandomText,
// `doc_tokens` each), each with one planted fact "The code of FIRST LAST
// is NNNN." (distinct names and codes within a context) at a random
// sentence boundary. For every document position one question asks for
// that document's code. The same plan runs twice: `--cache=prefix` (one
// causal chain: every document attends to the ones before it, stock LLM
// attention) and `--cache=span` (each document attends only to itself; the
// question attends to all). An answer is correct when it contains the
// asked code; answers naming another document's code are counted apart.
//
// Contexts run in groups: first one question per context (its documents
// are computed), then the other questions of the group (the documents come
// from the cache), so no document is computed twice by concurrent calls.
// Each run is one executor run, so decoding is batched.
//
//===----------------------------------------------------------------------===//
#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/Names.h"
#include "bench/common/RandomText.h"
#include "bench/common/Report.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace spanc::bench {
namespace {

struct Config {
  std::vector<int64_t> docCounts;
  int64_t docTokens = 32;
  int64_t maxTokens = 16;
  int64_t groupSize = 20;
  int64_t stepTokens = 2048;
  int contexts = 100;
};

struct Fact {
  std::string name, code;
};

struct Context {
  std::vector<std::string> documents;
  std::vector<Fact> facts; // one per document, in document order
};

/// `hay` with `sentence` inserted at a sentence boundary chosen by `random`.
std::string plant(const std::string &hay, const std::string &sentence,
                  std::mt19937_64 &random) {
  std::vector<size_t> boundaries = {0};
  for (size_t i = 0; i + 2 < hay.size(); ++i)
    if (hay[i] == '.' && hay[i + 1] == ' ')
      boundaries.push_back(i + 2);
  boundaries.push_back(hay.size() + 1);
  size_t at = boundaries[random() % boundaries.size()];
  if (at > hay.size())
    return hay + " " + sentence;
  return hay.substr(0, at) + sentence + " " + hay.substr(at);
}

Context makeContext(const model::Tokenizer &tokenizer, int64_t docs,
                    int64_t docTokens, uint64_t seed, std::mt19937_64 &random) {
  Context context;
  std::set<std::string> codes;
  std::vector<std::string> names = personNames(random, size_t(docs));
  for (int64_t d = 0; d < docs; ++d) {
    Fact fact;
    fact.name = names[d];
    do
      fact.code = std::to_string(1000 + random() % 9000);
    while (codes.count(fact.code));
    codes.insert(fact.code);
    std::string hay =
        makeDocument(tokenizer, seed * 7919 + uint64_t(d) + 1, docTokens);
    context.documents.push_back(plant(
        hay, "The code of " + fact.name + " is " + fact.code + ".", random));
    context.facts.push_back(fact);
  }
  return context;
}

/// A program asking, for each (context, position) in `questions`, the code
/// of that position's fact over the context's documents.
std::string programFor(const std::vector<Context> &contexts,
                       const std::vector<std::pair<size_t, size_t>> &questions,
                       const Config &config) {
  std::string source;
  llvm::raw_string_ostream os(source);
  std::set<size_t> used;
  for (auto [c, p] : questions)
    used.insert(c);
  for (size_t c : used)
    for (size_t d = 0; d < contexts[c].documents.size(); ++d)
      os << "let c" << c << "d" << d << " = \"\"\"" << contexts[c].documents[d]
         << "\"\"\"\n";
  for (auto [c, p] : questions) {
    os << "query c" << c << "p" << p
       << " {\n  gen(max_tokens = " << config.maxTokens
       << ", temperature = 0) {\n"
       << "    system \"You answer questions about the documents.\"\n"
       << "    plus {";
    for (size_t d = 0; d < contexts[c].documents.size(); ++d)
      os << " fragment c" << c << "d" << d;
    os << " }\n    user \"What is the code of " << contexts[c].facts[p].name
       << "? Reply with the code only.\"\n  }\n}\n";
  }
  os.flush();
  return source;
}

struct Tally {
  size_t questions = 0, correct = 0, otherCode = 0;
};

std::string escapeTsv(llvm::StringRef text) {
  std::string out;
  for (char c : text)
    out += (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

llvm::Error runAccuracy(const BenchArgs &args) {
  Config config;
  auto docCounts = args.intListSetting(
      "docs", args.quick ? llvm::ArrayRef<int64_t>{4}
                         : llvm::ArrayRef<int64_t>{4, 8, 16});
  if (!docCounts)
    return docCounts.takeError();
  config.docCounts = *docCounts;
  for (auto [key, target, fallback] :
       {std::make_tuple("doc_tokens", &config.docTokens, int64_t(32)),
        std::make_tuple("max_tokens", &config.maxTokens, int64_t(16)),
        std::make_tuple("group", &config.groupSize, int64_t(20)),
        std::make_tuple("step_tokens", &config.stepTokens, int64_t(2048))}) {
    auto value = args.intSetting(key, fallback);
    if (!value)
      return value.takeError();
    *target = *value;
  }
  // 40 contexts per count: 1 120 questions per mode over 4, 8 and 16
  // documents fit the benchmark suite's time on two cores.
  config.contexts = args.repetitionsOr(40, 4);
  for (int64_t docs : config.docCounts)
    if (docs < 1 || docs > int64_t(maxDistinctNames()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "docs: each count must be in 1..%zu, "
                                     "got %lld",
                                     maxDistinctNames(), (long long)docs);
  if (config.docTokens < 16 || config.maxTokens < 1 || config.groupSize < 1 ||
      config.stepTokens < 64)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "doc_tokens must be >= 16, max_tokens and group >= 1, step_tokens "
        ">= 64");

  LoadSampler load;
  auto session = ModelSession::load(args.modelPath);
  if (!session)
    return session.takeError();
  const model::Tokenizer &tokenizer = (*session)->tokenizer();

  // "prefix" is full causal attention (--cache=prefix); "span" is the
  // default span mode; span_modes= adds others (CONTEXT[+recomputeN]).
  struct Mode {
    std::string name;
    kv::CacheMode cacheMode;
    kv::SpanOptions spanOptions;
  };
  std::vector<Mode> modes = {{"prefix", kv::CacheMode::Prefix, {}},
                             {"span", kv::CacheMode::Span, {}}};
  const std::string spanModes = args.setting("span_modes", "");
  for (llvm::StringRef name : llvm::split(spanModes, ',')) {
    if (name.empty())
      continue;
    // CONTEXT[+recomputeN][+endN]
    llvm::SmallVector<llvm::StringRef, 3> parts;
    name.split(parts, '+');
    auto context = kv::parseSpanContext(parts[0]);
    if (!context)
      return context.takeError();
    Mode mode{name.str(), kv::CacheMode::Span, {*context, 0, 0}};
    for (llvm::StringRef part : llvm::makeArrayRef(parts).drop_front()) {
      bool bad = true;
      if (part.consume_front("recompute"))
        bad = part.getAsInteger(10, mode.spanOptions.recomputeBlocks);
      else if (part.consume_front("end"))
        bad = part.getAsInteger(10, mode.spanOptions.recomputeEndBlocks);
      if (bad)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "span_modes: bad mode '%s'",
                                       name.str().c_str());
    }
    modes.push_back(mode);
  }
  std::vector<std::unique_ptr<sched::Executor>> executors;
  for (const Mode &mode : modes) {
    sched::ExecutorOptions options;
    options.cacheMode = mode.cacheMode;
    options.spanOptions = mode.spanOptions;
    options.cacheTokens = 16384;
    options.stepTokenBudget = config.stepTokens;
    auto executor = (*session)->makeExecutor(options);
    if (!executor)
      return executor.takeError();
    executors.push_back(std::move(*executor));
  }

  std::string tsv = "docs\tcontext\tposition\tmode\tcorrect\tother_code\t"
                    "code\tanswer\n";
  // (docs, mode, position) → tally
  std::map<std::tuple<int64_t, std::string, int64_t>, Tally> tallies;
  std::map<std::pair<int64_t, std::string>, RunTotals> totals;
  // (docs, context, position) → correct per mode, for the paired counts.
  std::map<std::tuple<int64_t, size_t, size_t>, std::pair<bool, bool>> paired;
  std::mt19937_64 random(args.seed);
  uint64_t contextSeed = args.seed * 1000003;
  for (int64_t docs : config.docCounts) {
    std::vector<Context> contexts;
    for (int c = 0; c < config.contexts; ++c)
      contexts.push_back(makeContext(tokenizer, docs, config.docTokens,
                                     ++contextSeed, random));
    for (size_t begin = 0; begin < contexts.size();
         begin += size_t(config.groupSize)) {
      size_t end = std::min(contexts.size(), begin + size_t(config.groupSize));
      // Phase 1 asks about a random position per context (it computes the
      // documents); phase 2 asks the rest.
      std::vector<std::pair<size_t, size_t>> first, rest;
      for (size_t c = begin; c < end; ++c) {
        size_t warm = random() % size_t(docs);
        first.push_back({c, warm});
        for (size_t p = 0; p < size_t(docs); ++p)
          if (p != warm)
            rest.push_back({c, p});
      }
      for (const auto &questions : {first, rest}) {
        if (questions.empty())
          continue;
        std::string source = programFor(contexts, questions, config);
        auto plan = (*session)->compile(source, "accuracy.span");
        if (!plan)
          return plan.takeError();
        for (size_t m = 0; m < modes.size(); ++m) {
          std::string mode = modes[m].name;
          auto answers =
              (*session)->answers(*executors[m], *plan, &totals[{docs, mode}]);
          if (!answers)
            return answers.takeError();
          for (auto [c, p] : questions) {
            std::string query =
                "c" + std::to_string(c) + "p" + std::to_string(p);
            auto answerIt = answers->find(query);
            if (answerIt == answers->end())
              return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                             "no answer for query %s",
                                             query.c_str());
            const std::string &answer = answerIt->second;
            const std::string &code = contexts[c].facts[p].code;
            bool correct = llvm::StringRef(answer).contains(code);
            bool other = false;
            for (size_t d = 0; d < contexts[c].facts.size() && !correct; ++d)
              other |= d != p && llvm::StringRef(answer).contains(
                                     contexts[c].facts[d].code);
            auto &pair = paired[{docs, c, p}];
            if (m < 2)
              (m == 0 ? pair.first : pair.second) = correct;
            Tally &tally = tallies[{docs, mode, int64_t(p)}];
            ++tally.questions;
            tally.correct += correct;
            tally.otherCode += other;
            tsv += std::to_string(docs) + "\t" + std::to_string(c) + "\t" +
                   std::to_string(p) + "\t" + mode + "\t" +
                   (correct ? "1" : "0") + "\t" + (other ? "1" : "0") + "\t" +
                   code + "\t" + escapeTsv(answer) + "\n";
          }
        }
      }
      llvm::errs() << llvm::format(
          "accuracy: %lld docs, contexts %zu-%zu done (load %.1f)\n",
          (long long)docs, begin, end - 1, loadAverageNow());
    }
    for (const Mode &mode : modes) {
      const std::string &name = mode.name;
      const RunTotals &run = totals[{docs, name}];
      size_t correct = 0, questions = 0;
      for (int64_t p = 0; p < docs; ++p) {
        correct += tallies[{docs, name, p}].correct;
        questions += tallies[{docs, name, p}].questions;
      }
      llvm::errs() << llvm::format(
          "accuracy: %lld docs %-6s %zu/%zu correct, %zu calls, %llu tokens "
          "computed, %.1f s\n",
          (long long)docs, name.c_str(), correct, questions, run.calls,
          (unsigned long long)run.computedTokens, run.seconds);
    }
  }
  std::string loadLine = load.stopAndDescribe();

  std::string md;
  llvm::raw_string_ostream os(md);
  os << "# Accuracy audit: planted-fact QA, causal vs span attention\n\n"
     << "Measured " << timestampNow() << " by `spanc bench accuracy"
     << (args.quick ? " --quick" : "") << "` (seed " << args.seed << ").\n\n"
     << "- Machine: " << describeMachine() << "; " << loadLine << ".\n"
     << "- Model: " << (*session)->describeModel()
     << ", greedy, `max_tokens = " << config.maxTokens << "`.\n"
     << "- Workload: " << config.contexts << " contexts per document count; "
     << "a context is N documents of " << config.docTokens
     << " tokens of seeded random English words, each with one planted "
     << "fact \"The code of FIRST LAST is NNNN.\" at a random sentence "
     << "boundary (real names and 4-digit codes, distinct within a "
     << "context). System \"You answer questions about the documents.\", "
     << "the documents under a `plus`, user \"What is the code of FIRST "
     << "LAST? Reply with the code only.\" One question per document, so "
     << "each (N, position) point has " << config.contexts
     << " questions per mode.\n"
     << "- Modes, the same plan: **prefix** (`--cache=prefix`: one causal "
     << "chain, each document attends to those before it) and **span** "
     << "(`--cache=span`: each document attends only to itself, the "
     << "question to all).\n"
     << "- **correct**: the answer contains the asked code; **other**: it "
     << "contains another document's code instead. Interval: Wilson 95%.\n"
     << "- Scaled for a shared 2-core CPU and an 8 192-token model: short "
     << "documents (the paper's RAG documents are thousands of tokens) and "
     << "a 135M model; questions run in groups of " << config.groupSize
     << " contexts, each group one executor run per mode, so decoding is "
        "batched.\n\n";
  os << "## Accuracy per position of the fact's document\n\n"
     << "| documents | position | questions | prefix correct | prefix 95% CI "
        "| span correct | span 95% CI | span − prefix | prefix other | span "
        "other |\n|---|---|---|---|---|---|---|---|---|---|\n";
  struct Overall {
    size_t questions = 0, prefix = 0, span = 0;
  };
  std::map<int64_t, Overall> overall;
  for (int64_t docs : config.docCounts)
    for (int64_t p = 0; p < docs; ++p) {
      const Tally &prefix = tallies[{docs, "prefix", p}];
      const Tally &span = tallies[{docs, "span", p}];
      auto [pl, ph] = wilsonInterval(prefix.correct, prefix.questions);
      auto [sl, sh] = wilsonInterval(span.correct, span.questions);
      double pr =
          double(prefix.correct) / std::max<size_t>(1, prefix.questions);
      double sr = double(span.correct) / std::max<size_t>(1, span.questions);
      os << "| " << docs << " | " << p << " | " << prefix.questions << " | "
         << llvm::format("%.2f", pr) << " | "
         << llvm::format("[%.2f, %.2f]", pl, ph) << " | "
         << llvm::format("%.2f", sr) << " | "
         << llvm::format("[%.2f, %.2f]", sl, sh) << " | "
         << llvm::format("%+.2f", sr - pr) << " | " << prefix.otherCode << " | "
         << span.otherCode << " |\n";
      Overall &all = overall[docs];
      all.questions += prefix.questions;
      all.prefix += prefix.correct;
      all.span += span.correct;
    }
  os << "\n## Overall\n\n| documents | questions per mode | prefix correct | "
        "span correct | span − prefix | prefix calls / tokens computed / s | "
        "span calls / tokens computed / s |\n|---|---|---|---|---|---|---|\n";
  for (int64_t docs : config.docCounts) {
    const Overall &all = overall[docs];
    auto [pl, ph] = wilsonInterval(all.prefix, all.questions);
    auto [sl, sh] = wilsonInterval(all.span, all.questions);
    const RunTotals &pt = totals[{docs, "prefix"}],
                    &st = totals[{docs, "span"}];
    double pr = double(all.prefix) / std::max<size_t>(1, all.questions);
    double sr = double(all.span) / std::max<size_t>(1, all.questions);
    os << "| " << docs << " | " << all.questions << " | "
       << llvm::format("%.3f [%.3f, %.3f]", pr, pl, ph) << " | "
       << llvm::format("%.3f [%.3f, %.3f]", sr, sl, sh) << " | "
       << llvm::format("%+.3f", sr - pr) << " | " << pt.calls << " / "
       << pt.computedTokens << " / " << llvm::format("%.0f", pt.seconds)
       << " | " << st.calls << " / " << st.computedTokens << " / "
       << llvm::format("%.0f", st.seconds) << " |\n";
  }
  os << "\nPaired over the same questions:\n\n| documents | both correct | "
        "prefix only | span only | neither |\n|---|---|---|---|---|\n";
  for (int64_t docs : config.docCounts) {
    size_t both = 0, prefixOnly = 0, spanOnly = 0, neither = 0;
    for (const auto &[key, pair] : paired) {
      if (std::get<0>(key) != docs)
        continue;
      both += pair.first && pair.second;
      prefixOnly += pair.first && !pair.second;
      spanOnly += !pair.first && pair.second;
      neither += !pair.first && !pair.second;
    }
    os << "| " << docs << " | " << both << " | " << prefixOnly << " | "
       << spanOnly << " | " << neither << " |\n";
  }
  if (!config.docCounts.empty()) {
    int64_t docs = config.docCounts.back();
    const Overall &all = overall[docs];
    double pr = double(all.prefix) / std::max<size_t>(1, all.questions);
    double sr = double(all.span) / std::max<size_t>(1, all.questions);
    os << "\n**Headline** (" << docs << " documents, " << all.questions
       << " questions per mode): span attention answers "
       << llvm::format("%.1f%%", 100 * sr) << " correctly vs "
       << llvm::format("%.1f%%", 100 * pr) << " with full causal attention ("
       << llvm::format("%+.1f", 100 * (sr - pr))
       << " points); per position see above.\n";
  }
  os << "\nRaw rows, with every answer: `accuracy.tsv`.\n";
  os.flush();

  if (llvm::Error error = writeTextFile(resultPath(args, ".tsv"), tsv))
    return error;
  return finishResults(args, std::move(md));
}

BenchRegistration registration{
    {"accuracy",
     "planted-fact QA accuracy: causal (prefix) vs span attention per "
     "document position",
     "docs=4,8,16: documents per context, one table block each (--quick: 4); "
     "-r N: contexts per count (default 40)\n"
     "doc_tokens=32: tokens of hay per document\n"
     "max_tokens=16: the answer length\n"
     "group=20: contexts per executor run\n"
     "step_tokens=2048: the executor's token budget per forward step",
     runAccuracy}};

} // namespace
} // namespace spanc::bench
