//===- RagBench.cpp - RAG TTFT and relocation cost on SmolLM2, end to end -===//
//
// Drives the executor directly (the model loads once) on generated RAG
// queries: a short system prompt, N documents of ~512 tokens under a
// `plus`, a short question as the tail. Documents are English-like words
// drawn from a fixed list with a seeded generator, so every run sees the
// same text. Each query goes through the real pipeline (.span source →
// frontend → default passes → chat-template lowering → executor).
//
// For each document count, in one process, side by side and interleaved
// per repetition (max_tokens = 1: TTFT only):
//   prefix-cold           --cache=prefix, documents in order A
//   prefix-warm-shuffled  --cache=prefix, the same documents shuffled (B)
//   span-miss-<reloc>     --cache=span, order A (cold)
//   span-hit-<reloc>      --cache=span, order B, warm
// for reloc in {rope-in-kernel, rerope}. For --decode-docs counts also
//   span-hit-in-place-<reloc>  order B again (rerope: nothing left to move)
//   span-decode-<reloc>        order B with a long answer: decode tokens/s
// Every repetition uses new documents and a new system prompt, so "cold"
// is cold. The model's per-op timers run in every call, so each row also
// says how much of its forward time went to attention, RoPE and GEMMs.
// Rows go to --tsv; one line per call goes to stdout.
//
//===----------------------------------------------------------------------===//

#include "codegen/ChatTemplateEncoder.h"
#include "codegen/Lowering.h"
#include "frontend/Load.h"
#include "passes/PassManager.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Model.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace spanc;

namespace {

/// Common English words; documents are sentences of these.
const char *const kWords[] = {
    "the",       "of",       "and",     "to",       "in",      "a",
    "is",        "that",     "for",     "it",       "as",      "was",
    "with",      "be",       "by",      "on",       "not",     "he",
    "this",      "are",      "or",      "his",      "from",    "at",
    "which",     "but",      "have",    "an",       "had",     "they",
    "you",       "were",     "their",   "one",      "all",     "we",
    "can",       "her",      "has",     "there",    "been",    "if",
    "more",      "when",     "will",    "would",    "who",     "so",
    "no",        "river",    "city",    "market",   "winter",  "garden",
    "engine",    "village",  "letter",  "window",   "harbor",  "forest",
    "teacher",   "station",  "bridge",  "council",  "farmer",  "library",
    "mountain",  "kitchen",  "student", "doctor",   "machine", "history",
    "morning",   "evening",  "paper",   "stone",    "water",   "light",
    "people",    "family",   "school",  "country",  "company", "number",
    "system",    "program",  "problem", "question", "answer",  "report",
    "music",     "power",    "money",   "story",    "result",  "change",
    "build",     "carry",    "follow",  "gather",   "measure", "open",
    "close",     "travel",   "write",   "read",     "learn",   "choose",
    "explain",   "remember", "decide",  "return",   "arrive",  "repair",
    "quiet",     "bright",   "early",   "heavy",    "narrow",  "ancient",
    "careful",   "simple",   "public",  "local",    "small",   "large",
    "green",     "cold",     "warm",    "strong",   "slow",    "quick",
    "after",     "before",   "during",  "between",  "under",   "across",
    "because",   "although", "while",   "often",    "never",   "always",
    "yesterday", "together", "finally", "perhaps",  "several", "every",
};

/// ~`targetTokens` tokens of sentences (at most that many), from `seed`.
std::string makeDocument(const model::Tokenizer &tokenizer, uint64_t seed,
                         size_t targetTokens) {
  std::mt19937_64 random(seed);
  const size_t numWords = sizeof(kWords) / sizeof(kWords[0]);
  std::vector<std::string> words;
  size_t sentenceLeft = 0;
  auto render = [&](size_t count) {
    std::string text;
    for (size_t i = 0; i < count; ++i) {
      if (i)
        text += ' ';
      text += words[i];
    }
    return text;
  };
  // Grow in chunks, then trim word by word to the target.
  while (true) {
    for (int i = 0; i < 32; ++i) {
      std::string word = kWords[random() % numWords];
      if (sentenceLeft == 0) {
        if (!words.empty())
          words.back() += '.';
        word[0] = char(std::toupper(word[0]));
        sentenceLeft = 6 + random() % 10;
      }
      --sentenceLeft;
      words.push_back(std::move(word));
    }
    if (tokenizer.encode(render(words.size()), false).size() >= targetTokens)
      break;
  }
  size_t count = words.size();
  while (count > 1 &&
         tokenizer.encode(render(count), false).size() > targetTokens)
    --count;
  std::string text = render(count);
  return text + ".";
}

/// The .span source of one RAG query over `documents` in `order`.
std::string ragSource(const std::vector<std::string> &documents,
                      const std::vector<unsigned> &order, int64_t maxTokens,
                      const std::string &systemPrompt,
                      const std::string &question) {
  std::string source;
  for (unsigned i = 0; i < documents.size(); ++i)
    source +=
        "let d" + std::to_string(i) + " = \"\"\"" + documents[i] + "\"\"\"\n";
  source += "query rag {\n  gen(max_tokens = " + std::to_string(maxTokens) +
            ", temperature = 0) {\n    system \"" + systemPrompt +
            "\"\n    plus {";
  for (unsigned index : order)
    source += " fragment d" + std::to_string(index);
  source += " }\n    user \"" + question + "\"\n  }\n}\n";
  return source;
}

struct Compiler {
  const model::Tokenizer &tokenizer;
  const model::ChatTemplate &chatTemplate;

  llvm::Expected<codegen::Plan> compile(const std::string &source) const {
    llvm::SmallString<128> path;
    if (std::error_code error =
            llvm::sys::fs::createTemporaryFile("rag_bench", "span", path))
      return llvm::createStringError(error, "cannot create a temporary file");
    {
      std::error_code error;
      llvm::raw_fd_ostream out(path, error);
      if (error)
        return llvm::createStringError(error, "cannot write %s", path.c_str());
      out << source;
    }
    llvm::SourceMgr sourceMgr;
    ir::DiagnosticEngine diagnostics(sourceMgr);
    std::unique_ptr<ir::Module> module =
        frontend::loadModule(path, diagnostics);
    llvm::sys::fs::remove(path);
    if (!module)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the generated program does not parse");
    passes::PassOptions passOptions;
    passes::PassContext context(diagnostics, passOptions);
    passes::PassManager manager(context);
    manager.addDefaultPipeline();
    if (llvm::Error error = manager.run(*module))
      return error;
    codegen::ChatTemplateEncoder encoder(chatTemplate, tokenizer);
    std::optional<codegen::Plan> plan =
        codegen::lowerToPlan(*module, encoder, diagnostics);
    if (!plan || plan->calls.size() != 1)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "lowering did not give one call");
    return std::move(*plan);
  }
};

double cpuSeconds() {
  timespec time;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
  return double(time.tv_sec) + double(time.tv_nsec) * 1e-9;
}

/// One measured call.
struct Sample {
  double ttftMs = 0, cpuMs = 0, decodeTokensPerSecond = 0;
  /// The model's per-op timers over this run (wall time inside forward()).
  double forwardMs = 0, attentionMs = 0, ropeMs = 0, gemmMs = 0;
  uint32_t prompt = 0, reused = 0, computed = 0, relocated = 0, generated = 0;
};

llvm::Expected<Sample> runOnce(model::Model &model, sched::Executor &executor,
                               const codegen::Plan &plan) {
  model.resetProfile();
  double cpuStart = cpuSeconds();
  std::vector<sched::CallOutcome> outcomes = executor.run(plan);
  double cpu = cpuSeconds() - cpuStart;
  const sched::CallOutcome &outcome = outcomes.at(0);
  if (!outcome.succeeded)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "call failed: %s", outcome.error.c_str());
  Sample sample;
  sample.ttftMs = 1e3 * outcome.stats.ttftSeconds;
  sample.cpuMs = 1e3 * cpu;
  sample.decodeTokensPerSecond = outcome.stats.decodeTokensPerSecond();
  sample.prompt = outcome.stats.promptTokens;
  sample.reused = outcome.stats.reusedTokens;
  sample.computed = outcome.stats.computedTokens;
  sample.relocated = outcome.stats.relocatedTokens;
  sample.generated = outcome.stats.generatedTokens;
  const model::ForwardProfile &profile = model.profile();
  sample.forwardMs = 1e3 * profile.total();
  sample.attentionMs = 1e3 * profile.attentionSeconds;
  sample.ropeMs = 1e3 * profile.ropeSeconds;
  sample.gemmMs = 1e3 * (profile.qkvSeconds + profile.attentionOutputSeconds +
                         profile.gateUpSeconds + profile.downSeconds +
                         profile.outputHeadSeconds);
  return sample;
}

/// A permutation of 0..n-1 whose first element is not 0 (for n > 1), so a
/// prefix cache can reuse nothing past the system prompt.
std::vector<unsigned> shuffled(unsigned n, uint64_t seed) {
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i)
    order[i] = i;
  std::mt19937_64 random(seed);
  do
    std::shuffle(order.begin(), order.end(), random);
  while (n > 1 && order[0] == 0);
  return order;
}

std::vector<unsigned> identity(unsigned n) {
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i)
    order[i] = i;
  return order;
}

struct Options {
  std::string modelPath;
  std::vector<unsigned> documentCounts = {1, 2, 4, 8, 15};
  /// Repetitions per document count (the last one repeats for the rest).
  std::vector<unsigned> repetitions = {5, 5, 3, 2, 1};
  unsigned documentTokens = 512;
  /// Document counts that also measure a hit in place and decode.
  std::vector<unsigned> decodeDocuments = {4, 8};
  int64_t decodeTokens = 32;
  /// Above this many documents only rope-in-kernel runs (time on a
  /// loaded machine; the strategies are compared at the smaller counts).
  unsigned reropeMaxDocuments = 1000;
  std::string tsvPath;
  bool forceF32 = false;
};

bool parseList(llvm::StringRef text, std::vector<unsigned> &values) {
  values.clear();
  llvm::SmallVector<llvm::StringRef, 8> parts;
  text.split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    unsigned value;
    if (part.trim().getAsInteger(10, value) || value == 0)
      return false;
    values.push_back(value);
  }
  return !values.empty();
}

int usage(const char *message) {
  std::fprintf(stderr,
               "rag_bench: %s\nusage: rag_bench --model=GGUF [--docs=1,2,4,8,"
               "15] [--reps=5,5,3,2,1] [--doc-tokens=512]\n"
               "  [--decode-docs=4,8] [--decode-tokens=32] "
               "[--rerope-max-docs=N] [--tsv=FILE] [--f32]\n",
               message);
  return 2;
}

const char *relocationName(kv::RelocationMode mode) {
  return mode == kv::RelocationMode::Rerope ? "rerope" : "rope-in-kernel";
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    llvm::StringRef value = arg.split('=').second;
    unsigned number = 0;
    if (arg.startswith("--model="))
      options.modelPath = value.str();
    else if (arg.startswith("--docs=")) {
      if (!parseList(value, options.documentCounts))
        return usage("--docs takes positive integers, comma separated");
    } else if (arg.startswith("--reps=")) {
      if (!parseList(value, options.repetitions))
        return usage("--reps takes positive integers, comma separated");
    } else if (arg.startswith("--decode-docs=")) {
      if (!parseList(value, options.decodeDocuments))
        return usage("--decode-docs takes positive integers");
    } else if (arg.startswith("--doc-tokens=") &&
               !value.getAsInteger(10, number) && number >= 8)
      options.documentTokens = number;
    else if (arg.startswith("--decode-tokens=") &&
             !value.getAsInteger(10, number) && number >= 2)
      options.decodeTokens = number;
    else if (arg.startswith("--rerope-max-docs=") &&
             !value.getAsInteger(10, number))
      options.reropeMaxDocuments = number;
    else if (arg.startswith("--tsv="))
      options.tsvPath = value.str();
    else if (arg == "--f32")
      options.forceF32 = true;
    else
      return usage(("bad argument '" + arg.str() + "'").c_str());
  }
  if (options.modelPath.empty())
    return usage("--model is required");

  model::ModelOptions modelOptions;
  modelOptions.forceF32 = options.forceF32;
  auto loaded = model::Model::load(options.modelPath, modelOptions);
  if (!loaded) {
    std::fprintf(stderr, "rag_bench: cannot load '%s': %s\n",
                 options.modelPath.c_str(),
                 llvm::toString(loaded.takeError()).c_str());
    return 1;
  }
  model::Model &model = **loaded;
  auto tokenizer = model::Tokenizer::fromGguf(model.file());
  if (!tokenizer) {
    std::fprintf(stderr, "rag_bench: %s\n",
                 llvm::toString(tokenizer.takeError()).c_str());
    return 1;
  }
  auto chatTemplate = model::ChatTemplate::fromGguf(model.file(), **tokenizer);
  if (!chatTemplate) {
    std::fprintf(stderr, "rag_bench: %s\n",
                 llvm::toString(chatTemplate.takeError()).c_str());
    return 1;
  }
  Compiler compiler{**tokenizer, *chatTemplate};
  // Per-op timers in every run: they say where each TTFT goes.
  model.enableProfile(true);

  std::FILE *tsv = nullptr;
  if (!options.tsvPath.empty()) {
    tsv = std::fopen(options.tsvPath.c_str(), "w");
    if (!tsv) {
      std::fprintf(stderr, "rag_bench: cannot write %s\n",
                   options.tsvPath.c_str());
      return 1;
    }
    std::fprintf(tsv, "docs\trep\tconfig\tttft_ms\tcpu_ms\tprompt\treused\t"
                      "computed\trelocated\tgenerated\tdecode_tok_s\t"
                      "forward_ms\tattention_ms\trope_ms\tgemm_ms\n");
  }
  std::printf("threads %d, model %s, %s GEMMs\n", omp_get_max_threads(),
              options.modelPath.c_str(),
              options.forceF32 ? "f32" : "default (bf16)");

  // One executor per configuration; the cache holds two full 8k contexts,
  // so the warm run of a repetition always finds what its cold run left.
  const int64_t cacheTokens = 20480;
  auto makeExecutor =
      [&](kv::CacheMode cacheMode,
          kv::RelocationMode mode) -> std::unique_ptr<sched::Executor> {
    sched::ExecutorOptions executorOptions;
    executorOptions.cacheMode = cacheMode;
    executorOptions.relocationMode = mode;
    executorOptions.cacheTokens = cacheTokens;
    auto executor =
        sched::Executor::create(model, **tokenizer, executorOptions);
    if (!executor) {
      std::fprintf(stderr, "rag_bench: %s\n",
                   llvm::toString(executor.takeError()).c_str());
      std::exit(1);
    }
    return std::move(*executor);
  };
  const kv::RelocationMode relocations[] = {kv::RelocationMode::RopeInKernel,
                                            kv::RelocationMode::Rerope};

  auto fail = [](llvm::Error error) {
    std::fprintf(stderr, "rag_bench: %s\n",
                 llvm::toString(std::move(error)).c_str());
    std::exit(1);
  };
  auto record = [&](unsigned docs, unsigned rep, const std::string &config,
                    const Sample &sample) {
    if (tsv) {
      std::fprintf(tsv,
                   "%u\t%u\t%s\t%.3f\t%.3f\t%u\t%u\t%u\t%u\t%u\t%.2f\t%.3f\t"
                   "%.3f\t%.3f\t%.3f\n",
                   docs, rep, config.c_str(), sample.ttftMs, sample.cpuMs,
                   sample.prompt, sample.reused, sample.computed,
                   sample.relocated, sample.generated,
                   sample.decodeTokensPerSecond, sample.forwardMs,
                   sample.attentionMs, sample.ropeMs, sample.gemmMs);
      std::fflush(tsv);
    }
    std::printf("docs %2u rep %u %-28s ttft %9.1f ms cpu %9.1f ms prompt "
                "%5u reused %5u computed %5u relocated %5u gen %3u %6.1f "
                "tok/s attention %8.1f ms of %8.1f ms\n",
                docs, rep, config.c_str(), sample.ttftMs, sample.cpuMs,
                sample.prompt, sample.reused, sample.computed, sample.relocated,
                sample.generated, sample.decodeTokensPerSecond,
                sample.attentionMs, sample.forwardMs);
    std::fflush(stdout);
  };
  auto measure = [&](sched::Executor &executor, const codegen::Plan &plan) {
    auto sample = runOnce(model, executor, plan);
    if (!sample)
      fail(sample.takeError());
    return *sample;
  };
  auto documentsFor = [&](unsigned docs, uint64_t seed) {
    std::vector<std::string> documents;
    for (unsigned i = 0; i < docs; ++i)
      documents.push_back(
          makeDocument(**tokenizer, seed * 1000 + i, options.documentTokens));
    return documents;
  };
  auto compile = [&](const std::string &source) {
    auto plan = compiler.compile(source);
    if (!plan)
      fail(plan.takeError());
    return std::move(*plan);
  };
  const std::string question = "Which document mentions the river first?";
  // For decode: a question the model answers at length.
  const std::string longQuestion =
      "Copy the first document word for word, then summarize it.";

  std::unique_ptr<sched::Executor> prefix =
      makeExecutor(kv::CacheMode::Prefix, kv::RelocationMode::RopeInKernel);
  std::unique_ptr<sched::Executor> span[2] = {
      makeExecutor(kv::CacheMode::Span, relocations[0]),
      makeExecutor(kv::CacheMode::Span, relocations[1])};
  // Touch each executor once (page faults of the first KV writes, lazy
  // weight repacking) so the first repetition is not an outlier.
  {
    std::vector<std::string> documents = {
        makeDocument(**tokenizer, 999999, options.documentTokens / 4)};
    codegen::Plan plan =
        compile(ragSource(documents, identity(1), 1, "Warm-up.", question));
    measure(*prefix, plan);
    measure(*span[0], plan);
    measure(*span[1], plan);
  }
  auto repetitionsFor = [&](size_t index) {
    return options.repetitions[std::min(index, options.repetitions.size() - 1)];
  };
  unsigned rounds = 0;
  for (size_t i = 0; i < options.documentCounts.size(); ++i)
    rounds = std::max(rounds, repetitionsFor(i));
  // Round-robin over document counts, so an interrupted run still has a
  // first repetition of every count.
  for (unsigned rep = 0; rep < rounds; ++rep)
    for (size_t i = 0; i < options.documentCounts.size(); ++i) {
      if (rep >= repetitionsFor(i))
        continue;
      unsigned docs = options.documentCounts[i];
      uint64_t seed = uint64_t(docs) * 100 + rep;
      std::vector<std::string> documents = documentsFor(docs, seed);
      // A new system prompt per repetition: nothing is warm from before.
      std::string system = "You answer questions about the documents. "
                           "Session " +
                           std::to_string(seed) + ".";
      std::vector<unsigned> order = shuffled(docs, seed);
      codegen::Plan inOrder =
          compile(ragSource(documents, identity(docs), 1, system, question));
      codegen::Plan reordered =
          compile(ragSource(documents, order, 1, system, question));
      record(docs, rep, "prefix-cold", measure(*prefix, inOrder));
      record(docs, rep, "prefix-warm-shuffled", measure(*prefix, reordered));
      bool decode = llvm::is_contained(options.decodeDocuments, docs);
      for (int r = 0; r < 2; ++r) {
        if (relocations[r] == kv::RelocationMode::Rerope &&
            docs > options.reropeMaxDocuments)
          continue;
        std::string name = relocationName(relocations[r]);
        record(docs, rep, "span-miss-" + name, measure(*span[r], inOrder));
        record(docs, rep, "span-hit-" + name, measure(*span[r], reordered));
        if (!decode)
          continue;
        // The same order again: rerope moved the blocks there already.
        record(docs, rep, "span-hit-in-place-" + name,
               measure(*span[r], reordered));
        codegen::Plan generate = compile(ragSource(
            documents, order, options.decodeTokens, system, longQuestion));
        record(docs, rep, "span-decode-" + name, measure(*span[r], generate));
      }
    }
  if (tsv)
    std::fclose(tsv);
  return 0;
}
