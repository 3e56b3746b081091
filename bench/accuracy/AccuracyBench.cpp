//===- AccuracyBench.cpp - QA accuracy: full attention vs span modes ------===//
//
// The accuracy audit (issue 7 item 5, issue 14 item 4): what each span
// attention mode costs in answers, measured on the same questions as full
// causal attention (`--cache=prefix`, the reference). Modes: `full`, and
// span caching with each span attending to nothing but itself
// (`isolated`) or to the call's context before its plus (`prefix`), each
// optionally with boundary recompute of every span's first N blocks
// (`prefix+recompute1`, ...). One executor per mode, rope-in-kernel.
//
// Two tasks, the documents of a context under one `plus`:
//   codes  N documents of seeded random hay (`doc_tokens` each), each with
//          one planted fact "The code of FIRST LAST is NNNN." (distinct
//          names and codes within a context); a question per document asks
//          for its code; correct = the answer contains it.
//   prose  N short real-prose documents (notices, memos, announcements)
//          drawn from bench/accuracy/prose.json; a question per document
//          about a concrete name, number, place or date in it; correct =
//          the answer contains one of its accepted answers, ignoring case.
//   multihop  N passages of the Python documentation (`doc_tokens` each,
//          real technical prose) with a planted code each; a question per
//          document asks for its code and the code of the document half a
//          context away; correct = the answer holds both: the answer needs
//          two documents, far apart in the call.
//
// The binding diagnostic: per context and mode, the share of its questions
// that got the context's most common answer (a mode that answers most
// questions of a context with one code has bound the question to the
// wrong document); reported as the mean over contexts. With N questions
// per context its floor is 1/N.
//
// Contexts run in groups: first one question per context (its documents
// are computed), then the other questions of the group (the documents come
// from the cache), so no document is computed twice by concurrent calls.
// Each phase is one executor run per mode, so decoding is batched.
//
//===----------------------------------------------------------------------===//
#include "bench/accuracy/AccuracySettings.h"
#include "bench/accuracy/AccuracyTasks.h"
#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/Names.h"
#include "bench/common/RandomText.h"
#include "bench/common/Report.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <set>

namespace spanc::bench {
namespace {

/// A program asking each (context, position) of `questions` over the
/// context's documents, queries named cCpP.
std::string programFor(const std::vector<Context> &contexts,
                       const std::vector<std::pair<size_t, size_t>> &questions,
                       int64_t maxTokens) {
  std::string source;
  llvm::raw_string_ostream os(source);
  std::set<size_t> used;
  for (auto [c, p] : questions)
    used.insert(c);
  for (size_t c : used)
    for (size_t d = 0; d < contexts[c].documents.size(); ++d)
      os << "let c" << c << "d" << d << " = "
         << spanLiteral(contexts[c].documents[d]) << "\n";
  for (auto [c, p] : questions) {
    os << "query c" << c << "p" << p << " {\n  gen(max_tokens = " << maxTokens
       << ", temperature = 0) {\n"
       << "    system \"You answer questions about the documents.\"\n"
       << "    plus {";
    for (size_t d = 0; d < contexts[c].documents.size(); ++d)
      os << " fragment c" << c << "d" << d;
    os << " }\n    user " << spanLiteral(contexts[c].questions[p].text)
       << "\n  }\n}\n";
  }
  os.flush();
  return source;
}

/// What identifies an answer for the binding diagnostic: the first 4-digit
/// number for codes (the rest is chatter), the first two for multihop,
/// else the lower-cased words.
std::string answerKey(llvm::StringRef task, llvm::StringRef answer) {
  if (task == "codes" || task == "multihop") {
    std::string numbers;
    for (size_t i = 0; i + 4 <= answer.size(); ++i)
      if (llvm::all_of(answer.substr(i, 4), llvm::isDigit) &&
          (i == 0 || !llvm::isDigit(answer[i - 1]))) {
        numbers += (numbers.empty() ? "" : " ") + answer.substr(i, 4).str();
        if (task == "codes" || numbers.size() > 4)
          return numbers;
      }
    if (!numbers.empty())
      return numbers;
  }
  std::string key;
  for (char c : answer) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      key += char(std::tolower(static_cast<unsigned char>(c)));
    else if (!key.empty() && key.back() != ' ')
      key += ' ';
  }
  return llvm::StringRef(key).trim().str();
}

std::string escapeTsv(llvm::StringRef text) {
  std::string out;
  for (char c : text)
    out += (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

/// A (task, document length, document count) block of the tables.
struct Cell {
  std::string task;
  int64_t docTokens = 0; // codes, multihop: tokens per document; prose: 0
  int64_t docs = 0;
  bool operator<(const Cell &other) const {
    return std::tie(task, docTokens, docs) <
           std::tie(other.task, other.docTokens, other.docs);
  }
};

struct Tally {
  size_t questions = 0, correct = 0, other = 0;
  /// Against full, over the same questions.
  size_t fullOnly = 0, modeOnly = 0;
  /// Sum over contexts of the most common answer's share, and contexts.
  double topShareSum = 0;
  size_t contexts = 0;
  RunTotals run;
};

std::string lengthLabel(const Cell &cell, double proseTokens) {
  return hasDocTokens(cell.task) ? std::to_string(cell.docTokens)
                                 : printed("prose (~%.0f)", proseTokens);
}

/// What the prose and multihop tasks draw their documents from (empty for
/// a task that does not run).
struct Corpora {
  std::vector<ProseDocument> prose;
  std::vector<std::string> passages;
};

/// Loads the corpora of the tasks that run, and checks each has enough
/// documents for every document count.
llvm::Expected<Corpora> loadCorpora(const BenchArgs &args,
                                    const AccuracySettings &settings) {
  Corpora corpora;
  llvm::SmallString<256> prosePath(args.repoRoot);
  llvm::sys::path::append(prosePath, "bench", "accuracy", "prose.json");
  if (settings.runs("prose")) {
    auto loaded = loadProse(prosePath);
    if (!loaded)
      return loaded.takeError();
    corpora.prose = std::move(*loaded);
    for (int64_t docs : settings.docCounts)
      if (size_t(docs) > corpora.prose.size())
        return failure("docs: " + llvm::Twine(docs) + " > the " +
                       llvm::Twine(corpora.prose.size()) + " prose documents");
  }
  if (settings.runs("multihop")) {
    for (int64_t docs : settings.docCounts)
      if (docs < 2)
        return failure("docs: multihop asks about two documents, got " +
                       llvm::Twine(docs));
    auto loaded = loadPassages(args.setting(
        "multihop_corpus", "/usr/share/doc/python3.11/html/_sources/library"));
    if (!loaded)
      return loaded.takeError();
    corpora.passages = std::move(*loaded);
  }
  return corpora;
}

/// A cache of 16k tokens per executor (five executors stay well under a
/// gigabyte each); groups shrink so one phase's documents fit in it.
constexpr int64_t CacheTokens = 16384;

/// One executor per mode, in the order of `settings.modes`.
llvm::Expected<std::vector<std::unique_ptr<sched::Executor>>>
makeModeExecutors(const ModelSession &session,
                  const AccuracySettings &settings) {
  std::vector<std::unique_ptr<sched::Executor>> executors;
  for (const Mode &mode : settings.modes) {
    sched::ExecutorOptions options;
    options.cacheMode = mode.full ? kv::CacheMode::Prefix : kv::CacheMode::Span;
    options.spanOptions = mode.span;
    options.cacheTokens = CacheTokens;
    options.stepTokenBudget = settings.stepTokens;
    auto executor = session.makeExecutor(options);
    if (!executor)
      return executor.takeError();
    executors.push_back(std::move(*executor));
  }
  return executors;
}

/// Everything the runs measured: the raw rows and the tallies the tables
/// are made of.
struct AccuracyResults {
  std::string tsv = "task\tdoc_tokens\tdocs\tcontext\tposition\tmode\tcorrect"
                    "\tother\texpected\tanswer\n";
  std::map<std::pair<Cell, std::string>, Tally> tallies;
  /// (cell, position, mode) → questions, correct: the per-position table.
  std::map<std::tuple<Cell, int64_t, std::string>, std::pair<size_t, size_t>>
      positions;
  std::vector<Cell> cells;
};

/// What one measurement run shares: the model, its executors, the corpora
/// and the seeded streams every context and question is drawn from (their
/// order of use decides the workload).
struct AccuracyRun {
  const AccuracySettings &settings;
  const ModelSession &session;
  llvm::ArrayRef<std::unique_ptr<sched::Executor>> executors;
  const Corpora &corpora;
  double proseTokens = 0;
  std::mt19937_64 random;
  uint64_t contextSeed = 0;
  AccuracyResults results;
};

/// The contexts of one cell, drawn from the run's streams.
std::vector<Context> makeContexts(AccuracyRun &run, const Cell &cell,
                                  int64_t contextCount) {
  const model::Tokenizer &tokenizer = run.session.tokenizer();
  std::vector<Context> contexts;
  for (int64_t c = 0; c < contextCount; ++c)
    contexts.push_back(
        cell.task == "codes"
            ? makeCodesContext(tokenizer, cell.docs, cell.docTokens,
                               ++run.contextSeed, run.random)
        : cell.task == "multihop"
            ? makeMultihopContext(tokenizer, run.corpora.passages, cell.docs,
                                  cell.docTokens, run.random)
            : makeProseContext(run.corpora.prose, cell.docs, run.random));
  return contexts;
}

/// (context, mode) → answer key → count, for the binding diagnostic.
using AnswerCounts =
    std::map<std::pair<size_t, std::string>, std::map<std::string, size_t>>;

/// Whether `answer` holds what `question` accepts.
bool answerHolds(llvm::StringRef answer, const Question &question) {
  auto found = [&](const std::string &accepted) {
    return containsIgnoringCase(answer, accepted);
  };
  return question.needsAll ? llvm::all_of(question.accepted, found)
                           : llvm::any_of(question.accepted, found);
}

/// Scores one mode's answer to question (c, p) into the tallies, the
/// position table, the answer counts and the raw rows. `fullCorrect` holds
/// full's verdicts of this phase (full runs first), for the paired counts.
void scoreAnswer(AccuracyResults &results, const Cell &cell, const Mode &mode,
                 const Context &context, size_t c, size_t p,
                 const std::string &answer,
                 std::map<std::pair<size_t, size_t>, bool> &fullCorrect,
                 AnswerCounts &answerCounts) {
  Tally &tally = results.tallies[{cell, mode.name}];
  bool correct = answerHolds(answer, context.questions[p]);
  bool other = false;
  for (size_t d = 0; d < context.questions.size() && !correct; ++d)
    other |= d != p && answerHolds(answer, context.questions[d]);
  if (mode.full)
    fullCorrect[{c, p}] = correct;
  else {
    bool full = fullCorrect[{c, p}];
    tally.fullOnly += full && !correct;
    tally.modeOnly += !full && correct;
  }
  ++tally.questions;
  tally.correct += correct;
  tally.other += other;
  auto &position = results.positions[{cell, int64_t(p), mode.name}];
  ++position.first;
  position.second += correct;
  ++answerCounts[{c, mode.name}][answerKey(cell.task, answer)];
  results.tsv +=
      cell.task + "\t" + std::to_string(cell.docTokens) + "\t" +
      std::to_string(cell.docs) + "\t" + std::to_string(c) + "\t" +
      std::to_string(p) + "\t" + mode.name + "\t" + (correct ? "1" : "0") +
      "\t" + (other ? "1" : "0") + "\t" +
      escapeTsv(llvm::join(context.questions[p].accepted,
                           context.questions[p].needsAll ? " & " : " | ")) +
      "\t" + escapeTsv(answer) + "\n";
}

/// One phase: `questions` as one program, one batched executor run per
/// mode, every answer scored.
llvm::Error askPhase(AccuracyRun &run, const Cell &cell,
                     const std::vector<Context> &contexts,
                     const std::vector<std::pair<size_t, size_t>> &questions,
                     AnswerCounts &answerCounts) {
  auto plan = run.session.compile(
      programFor(contexts, questions, run.settings.maxTokensFor(cell.task)),
      "accuracy.span");
  if (!plan)
    return plan.takeError();
  std::map<std::pair<size_t, size_t>, bool> fullCorrect;
  for (size_t m = 0; m < run.settings.modes.size(); ++m) {
    const Mode &mode = run.settings.modes[m];
    Tally &tally = run.results.tallies[{cell, mode.name}];
    auto answers = run.session.answers(*run.executors[m], *plan, &tally.run);
    if (!answers)
      return answers.takeError();
    for (auto [c, p] : questions) {
      std::string query = "c" + std::to_string(c) + "p" + std::to_string(p);
      auto found = answers->find(query);
      if (found == answers->end())
        return failure("no answer for query " + query);
      scoreAnswer(run.results, cell, mode, contexts[c], c, p, found->second,
                  fullCorrect, answerCounts);
    }
  }
  return llvm::Error::success();
}

/// The binding diagnostic: per context and mode, the share of the most
/// common answer, summed into the mode's tally.
void addTopShares(AccuracyResults &results, const Cell &cell,
                  const AnswerCounts &answerCounts) {
  for (const auto &[key, counts] : answerCounts) {
    size_t top = 0, all = 0;
    for (const auto &[answer, count] : counts) {
      top = std::max(top, count);
      all += count;
    }
    Tally &tally = results.tallies[{cell, key.second}];
    tally.topShareSum += double(top) / double(all);
    ++tally.contexts;
  }
}

/// A line per mode on stderr once a cell is done (a long run shows where
/// it is).
void logCell(AccuracyRun &run, const Cell &cell) {
  for (const Mode &mode : run.settings.modes) {
    const Tally &tally = run.results.tallies[{cell, mode.name}];
    llvm::errs() << llvm::format(
        "accuracy: %s %lld docs %-22s %zu/%zu correct, top-answer "
        "share %.2f, %llu tokens computed, %.1f s, repaired %.1f%%, "
        "probe %.1f ms/call\n",
        cell.task.c_str(), (long long)cell.docs, mode.name.c_str(),
        tally.correct, tally.questions,
        tally.topShareSum / double(tally.contexts),
        (unsigned long long)tally.run.computedTokens, tally.run.seconds,
        100.0 * double(tally.run.repairedTokens) /
            double(std::max<uint64_t>(1, tally.run.spanTokens)),
        tally.run.probes
            ? 1e3 * tally.run.probeSeconds / double(tally.run.probes)
            : 0.0);
  }
}

/// One measurement point: a cell's contexts, asked in groups of two phases
/// (a random question per context computes its documents; the rest find
/// them in the cache), so no document is computed twice by concurrent
/// calls.
llvm::Error measureCell(AccuracyRun &run, const Cell &cell,
                        int64_t contextCount) {
  std::vector<Context> contexts = makeContexts(run, cell, contextCount);
  const int64_t docs = cell.docs;
  double tokensPerDoc = hasDocTokens(cell.task) ? double(cell.docTokens) + 12
                                                : run.proseTokens + 8;
  size_t perGroup = size_t(
      std::clamp<int64_t>(int64_t(12000 / (double(docs) * tokensPerDoc + 64)),
                          1, run.settings.groupSize));
  AnswerCounts answerCounts;
  for (size_t begin = 0; begin < contexts.size(); begin += perGroup) {
    size_t end = std::min(contexts.size(), begin + perGroup);
    std::vector<std::pair<size_t, size_t>> first, rest;
    for (size_t c = begin; c < end; ++c) {
      size_t warm = run.random() % size_t(docs);
      first.push_back({c, warm});
      for (size_t p = 0; p < size_t(docs); ++p)
        if (p != warm)
          rest.push_back({c, p});
    }
    for (const auto &questions : {first, rest}) {
      if (questions.empty())
        continue;
      if (llvm::Error error =
              askPhase(run, cell, contexts, questions, answerCounts))
        return error;
    }
    llvm::errs() << llvm::format(
        "accuracy: %s, %s tokens, %lld docs, contexts %zu-%zu done "
        "(load %.1f)\n",
        cell.task.c_str(), lengthLabel(cell, run.proseTokens).c_str(),
        (long long)docs, begin, end - 1, loadAverageNow());
  }
  addTopShares(run.results, cell, answerCounts);
  logCell(run, cell);
  return llvm::Error::success();
}

/// Every cell: per task, per document length (codes, multihop), per
/// document count.
llvm::Error measureAll(AccuracyRun &run) {
  const AccuracySettings &settings = run.settings;
  for (const std::string &task : settings.tasks) {
    size_t lengths = hasDocTokens(task) ? settings.docTokenList.size() : 1;
    for (size_t lengthIndex = 0; lengthIndex < lengths; ++lengthIndex)
      for (int64_t docs : settings.docCounts) {
        Cell cell{task,
                  hasDocTokens(task) ? settings.docTokenList[lengthIndex] : 0,
                  docs};
        run.results.cells.push_back(cell);
        int64_t contextCount = hasDocTokens(task)
                                   ? settings.contextsFor(lengthIndex)
                                   : settings.proseContextCount();
        if (llvm::Error error = measureCell(run, cell, contextCount))
          return error;
      }
  }
  return llvm::Error::success();
}

/// accuracy.md's title and setup: the modes, the prompt and each task.
void writeAccuracySetup(llvm::raw_ostream &os, const BenchArgs &args,
                        const AccuracySettings &settings,
                        const ModelSession &session, const AccuracyRun &run,
                        llvm::StringRef loadLine) {
  os << "# Accuracy audit: full attention vs span attention modes\n\n"
     << "Measured " << timestampNow() << " by `spanc bench accuracy"
     << commandLine(args) << "` (seed " << args.seed << ").\n\n"
     << "- Machine: " << describeMachine() << "; " << loadLine << ".\n"
     << "- Model: " << session.describeModel()
     << ", greedy, `max_tokens = " << settings.maxTokens
     << "` (prose: " << settings.proseMaxTokens << ").\n"
     << "- Modes, the same plans on one executor each (rope-in-kernel): "
        "**full** (`--cache=prefix`: one causal chain, the reference); "
        "**isolated** (`--cache=span --span-context=isolated`: a span "
        "attends only to itself); **prefix** (`--span-context=prefix`: each "
        "span attends to the call's context before its plus, the system "
        "turn, not to its siblings); **+recomputeN** "
        "(`--span-recompute=N`: each span's first N blocks recomputed in "
        "the call's context, the tail reads those rows); **+endN** "
        "(`--span-recompute-end=N`: the same for each span's last N "
        "blocks; `prefix+end1` is spanc's default); **+blendP** "
        "(`--span-blend=P`, CacheBlend-style: the P % of span tokens whose "
        "K/V move most over the first 2 layers recomputed); **+guidedR** "
        "(`--span-guided=R`, question-guided: the question runs once over "
        "the stitched spans and the R % of span blocks that receive the "
        "most attention, summed over heads and the layers named — all, "
        "`+last`, `+upper` — are recomputed; `+tokens` ranks tokens). "
        "**repaired %**: span tokens a repair recomputed through every "
        "layer, over all span tokens of the mode's calls (head and end "
        "recompute not included); **probe ms**: a guided repair's first "
        "pass per call that ran one. Ran: ";
  for (const Mode &mode : settings.modes)
    os << (&mode == &settings.modes.front() ? "" : ", ") << "`" << mode.name
       << "`";
  os << ".\n"
     << "- Prompt: system \"You answer questions about the documents.\", "
        "the N documents under a `plus`, the question as the user turn. One "
        "question per document of a context.\n";
  if (settings.runs("codes")) {
    os << "- **codes**: documents of seeded random English words (the "
          "length column: tokens of hay), each with one planted fact \"The "
          "code of FIRST LAST is NNNN.\" at a random sentence boundary (real "
          "names, 4-digit codes, distinct within a context); \"What is the "
          "code of FIRST LAST? Reply with the code only.\"; correct = the "
          "answer contains the code. Contexts per document count: ";
    for (size_t i = 0; i < settings.docTokenList.size(); ++i)
      os << (i ? ", " : "") << settings.contextsFor(i) << " at "
         << settings.docTokenList[i] << " tokens";
    os << ".\n";
  }
  if (settings.runs("prose"))
    os << "- **prose**: N documents drawn (seeded) from the "
       << run.corpora.prose.size()
       << " short real-prose documents of bench/accuracy/prose.json "
          "(notices, memos, product notes, announcements; "
       << llvm::format("%.0f", run.proseTokens)
       << " tokens on average), a natural question about one of them + "
          "\" Answer briefly.\"; correct = the answer contains one of its "
          "accepted answers, ignoring case. "
       << settings.proseContextCount() << " contexts per document count.\n";
  if (settings.runs("multihop"))
    os << "- **multihop**: N passages of the Python documentation (Debian "
          "python3.11-doc's reST sources of the library reference, "
       << run.corpora.passages.size()
       << " prose paragraphs; markup stripped), each cut to the length "
          "column's tokens at a sentence end, with a planted \"The code of "
          "FIRST LAST is NNNN.\"; question d asks \"What are the codes of "
          "A and of B? Reply with the two codes only.\" for documents d and "
          "d + N/2: correct = the answer holds both codes. Two facts from "
          "two documents far apart in the call (a 135M model cannot chain "
          "a bridge entity, so the second hop is a second lookup). "
          "Contexts as for codes; max_tokens doubled.\n";
  os << "- **correct**: count and rate with its Wilson 95% interval; **− "
        "full**: the difference to full attention in points; **full only / "
        "mode only**: paired over the same questions; **other**: the answer "
        "holds another document's answer instead. **top share**: per "
        "context, the share of its questions that got the context's most "
        "common answer (codes: the first 4-digit number), averaged over "
        "contexts — the binding diagnostic: near 1 a mode answers every "
        "question with one document's fact; its floor is 1/N.\n"
     << "- Scaled for a shared 2-core CPU: short documents and a 135M "
        "model; contexts run in groups (one phase computes each context's "
        "documents with one question, the next asks the rest from the "
        "cache), each phase one batched executor run per mode.\n\n";
}

/// The share of questions a tally got right (0 without questions).
double rateOf(const Tally &tally) {
  return double(tally.correct) / double(std::max<size_t>(1, tally.questions));
}

/// The per-mode table of accuracy.md and its rows in accuracy-modes.tsv
/// (what pareto.py joins); returns the tsv.
std::string writeModeTable(llvm::raw_ostream &os, AccuracyRun &run) {
  const std::vector<Mode> &modes = run.settings.modes;
  auto &tallies = run.results.tallies;
  std::string modesTsv = "task\tdoc_tokens\tdocs\tmode\tquestions\tcorrect\t"
                         "accuracy\tci_low\tci_high\tdiff_full_points\t"
                         "top_answer_share\trepaired_fraction\t"
                         "probe_ms_per_call\n";
  os << "## Accuracy per mode\n\n| task | doc tokens | documents | mode | "
        "questions | correct | rate [95% CI] | − full (points) | full only / "
        "mode only | other | top share | tokens computed / s | repaired % | "
        "probe ms |\n"
        "|---|---|---:|---|---:|---:|---|---:|---|---:|---:|---|---:|---:|\n";
  for (const Cell &cell : run.results.cells) {
    double fullRate = rateOf(tallies[{cell, modes.front().name}]);
    for (const Mode &mode : modes) {
      const Tally &tally = tallies[{cell, mode.name}];
      double rate = rateOf(tally);
      double topShare =
          tally.contexts ? tally.topShareSum / double(tally.contexts) : 0;
      auto [low, high] = wilsonInterval(tally.correct, tally.questions);
      double repairedFraction =
          double(tally.run.repairedTokens) /
          double(std::max<uint64_t>(1, tally.run.spanTokens));
      double probeMs = tally.run.probes ? 1e3 * tally.run.probeSeconds /
                                              double(tally.run.probes)
                                        : 0.0;
      os << "| " << cell.task << " | " << lengthLabel(cell, run.proseTokens)
         << " | " << cell.docs << " | " << mode.name << " | " << tally.questions
         << " | " << tally.correct << " | "
         << llvm::format("%.3f [%.3f, %.3f]", rate, low, high) << " | "
         << (mode.full ? std::string("—")
                       : printed("%+.1f", 100 * (rate - fullRate)))
         << " | "
         << (mode.full ? std::string("—")
                       : printed("%zu / %zu", tally.fullOnly, tally.modeOnly))
         << " | " << tally.other << " | " << llvm::format("%.2f", topShare)
         << " | " << tally.run.computedTokens << " / "
         << llvm::format("%.0f", tally.run.seconds) << " | "
         << (tally.run.repairedTokens
                 ? printed("%.1f", 100.0 * double(tally.run.repairedTokens) /
                                       double(std::max<uint64_t>(
                                           1, tally.run.spanTokens)))
                 : std::string("—"))
         << " | "
         << (tally.run.probes ? printed("%.1f", probeMs) : std::string("—"))
         << " |\n";
      modesTsv +=
          cell.task + "\t" + std::to_string(cell.docTokens) + "\t" +
          std::to_string(cell.docs) + "\t" + mode.name + "\t" +
          std::to_string(tally.questions) + "\t" +
          std::to_string(tally.correct) + "\t" +
          printed("%.4f\t%.4f\t%.4f\t%.2f\t%.4f\t%.4f\t%.2f\n", rate, low, high,
                  100 * (rate - fullRate), topShare, repairedFraction, probeMs);
    }
  }
  return modesTsv;
}

/// Accuracy per position of the asked document: where in the plus a mode
/// loses answers.
void writePositionTable(llvm::raw_ostream &os, AccuracyRun &run) {
  const std::vector<Mode> &modes = run.settings.modes;
  os << "\n## Accuracy per position of the asked document\n\n| task | doc "
        "tokens | documents | position |";
  for (const Mode &mode : modes)
    os << " " << mode.name << " |";
  os << "\n|---|---|---:|---:|";
  for (size_t m = 0; m < modes.size(); ++m)
    os << "---:|";
  os << "\n";
  for (const Cell &cell : run.results.cells)
    for (int64_t p = 0; p < cell.docs; ++p) {
      os << "| " << cell.task << " | " << lengthLabel(cell, run.proseTokens)
         << " | " << cell.docs << " | " << p << " |";
      for (const Mode &mode : modes) {
        auto [questions, correct] = run.results.positions[{cell, p, mode.name}];
        os << " "
           << llvm::format("%.2f", double(correct) /
                                       double(std::max<size_t>(1, questions)))
           << " |";
      }
      os << "\n";
    }
}

/// The headline: the largest document count of the first task and length,
/// each span mode against full.
void writeHeadline(llvm::raw_ostream &os, AccuracyRun &run) {
  const std::vector<Cell> &cells = run.results.cells;
  if (cells.empty())
    return;
  const std::vector<Mode> &modes = run.settings.modes;
  auto &tallies = run.results.tallies;
  Cell cell = cells.front();
  for (const Cell &other : cells)
    if (other.task == cell.task && other.docTokens == cell.docTokens)
      cell = other;
  const Tally &full = tallies[{cell, modes.front().name}];
  double fullRate = rateOf(full);
  os << "\n**Headline** (" << cell.task << ", "
     << lengthLabel(cell, run.proseTokens) << " tokens, " << cell.docs
     << " documents, " << full.questions << " questions per mode): full "
     << "attention answers " << llvm::format("%.1f%%", 100 * fullRate);
  for (const Mode &mode : modes) {
    if (mode.full)
      continue;
    double rate = rateOf(tallies[{cell, mode.name}]);
    os << ", " << mode.name << " " << llvm::format("%.1f%%", 100 * rate) << " ("
       << llvm::format("%+.1f", 100 * (rate - fullRate)) << ")";
  }
  os << ".\n";
}

llvm::Error runAccuracy(const BenchArgs &args) {
  auto settings = readAccuracySettings(args);
  if (!settings)
    return settings.takeError();
  auto corpora = loadCorpora(args, *settings);
  if (!corpora)
    return corpora.takeError();

  LoadSampler load;
  auto session = ModelSession::load(args);
  if (!session)
    return session.takeError();
  double proseTokens = 0;
  for (const ProseDocument &document : corpora->prose)
    proseTokens +=
        double((*session)->tokenizer().encode(document.text, false).size()) /
        double(corpora->prose.size());
  auto executors = makeModeExecutors(**session, *settings);
  if (!executors)
    return executors.takeError();
  AccuracyRun run{*settings,           **session,
                  *executors,          *corpora,
                  proseTokens,         std::mt19937_64(args.seed),
                  args.seed * 1000003, {}};
  if (llvm::Error error = measureAll(run))
    return error;
  std::string loadLine = load.stopAndDescribe();

  std::string md;
  llvm::raw_string_ostream os(md);
  writeAccuracySetup(os, args, *settings, **session, run, loadLine);
  std::string modesTsv = writeModeTable(os, run);
  writePositionTable(os, run);
  writeHeadline(os, run);
  os << "\nRaw rows, with every answer: `" << args.name << ".tsv`; per mode: `"
     << args.name
     << "-modes.tsv` (what bench/accuracy/pareto.py joins with rag.tsv).\n";
  os.flush();

  if (llvm::Error error =
          writeTextFile(resultPath(args, ".tsv"), run.results.tsv))
    return error;
  if (llvm::Error error =
          writeTextFile(resultPath(args, "-modes.tsv"), modesTsv))
    return error;
  return finishResults(args, std::move(md));
}

BenchRegistration registration{
    {"accuracy",
     "QA accuracy of full attention vs the span modes (isolated, prefix, "
     "+recompute, +end, +blend, +guided), planted codes, real prose and "
     "two-document lookups",
     "  task=codes,prose,multihop: the tasks (planted codes in hay; "
     "questions about bench/accuracy/prose.json; two planted codes asked "
     "at once over Python documentation passages)\n"
     "  multihop_corpus=/usr/share/doc/python3.11/html/_sources/library: "
     "multihop's reST sources\n"
     "  modes=full,isolated,prefix,isolated+recompute1,prefix+recompute1,"
     "prefix+end1,prefix+recompute1+end1: the configurations (full, the "
     "reference, is always run; any `spanc run --span-mode` name: "
     "CONTEXT[+recomputeN][+endN][+blendP|+guidedR[+last|+upper][+tokens]"
     "[+nearN]][+tempP][+massP])\n"
     "  recompute=1: N of the default +recomputeN and +endN modes\n"
     "  docs=4,8,16: documents per context (--quick: 4)\n"
     "  doc_tokens=32,256: codes: tokens of hay per document, a list (--quick: "
     "32)\n"
     "  contexts=40,12: codes: contexts per document count, one per doc_tokens "
     "entry, the last repeats (--quick: 4; -r N: all N)\n"
     "  prose_contexts=24: prose: contexts per document count (--quick: 4; -r "
     "N: N)\n"
     "  max_tokens=16: the answer length (codes)\n"
     "  prose_max_tokens=32: the answer length (prose)\n"
     "  group=20: at most this many contexts per executor run (fewer when "
     "their documents would not fit a 16k-token cache)\n"
     "  step_tokens=2048: the executor's token budget per forward step",
     runAccuracy}};

} // namespace
} // namespace spanc::bench
