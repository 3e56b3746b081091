//===- BulkBench.cpp - `spanc bench bulk`: bulk temporal locality ---------===//
//
// The paper's bulk experiment on a real English corpus: the Python
// documentation's reStructuredText sources from Debian's python3.11-doc,
// chunked into ~100-token fragments and indexed with the project's corpus
// index (retrieval/: SQLite FTS5, BM25). A bulk of B RAG questions
// (each a few consecutive words of a randomly chosen fragment, answered
// over its top-k fragments) runs as one module — one plan, continuously
// batched — under a KV cache that holds only a few queries' fragments, so
// the order in which queries run decides what is still cached:
//   stock             --cache=prefix, the written (random) order
//   span-fifo         --cache=span, bulk-order skipped (written order)
//   span-bulk-order   --cache=span, the default pipeline (bulk-order groups
//                     queries that share fragments)
// Figure of merit: mean TTFT over the bulk's queries (max_tokens = 1), as
// a speedup over stock.
//
//===----------------------------------------------------------------------===//

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/Report.h"
#include "retrieval/Chunker.h"
#include "retrieval/CorpusIndex.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

namespace spanc::bench {

namespace {

/// Where Debian's python3.11-doc puts the documentation sources.
const char *const DefaultCorpus =
    "/usr/share/doc/python3.11/html/_sources/tutorial";

/// ~100-token fragments (the paper's size). reST averages ~4.5 bytes per
/// SmolLM2 token, but its paragraphs are short (headings, code lines, list
/// items), so short ones join the next up to a larger minimum.
retrieval::ChunkOptions fragmentChunking() {
  retrieval::ChunkOptions options;
  options.maxBytes = 640;
  options.overlapBytes = 64;
  options.minBytes = 320;
  return options;
}

/// A fragment of the corpus, as the chunker cuts it.
struct CorpusFragment {
  std::string path;
  std::string text;
};

/// Copies the corpus's .txt files (reST sources are *.rst.txt) into
/// `copy`, so the index file is written there and not into /usr/share, and
/// returns every fragment in file order.
llvm::Expected<std::vector<CorpusFragment>>
copyCorpus(llvm::StringRef source, llvm::StringRef copy,
           const retrieval::ChunkOptions &chunking) {
  if (!llvm::sys::fs::is_directory(source))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "no corpus folder '%s' (install Debian's python3.11-doc: "
        "tools/setup.sh does; or --set corpus=DIR)",
        source.str().c_str());
  std::vector<std::string> files;
  std::error_code error;
  for (llvm::sys::fs::recursive_directory_iterator it(source, error), end;
       !error && it != end; it.increment(error)) {
    llvm::StringRef path = it->path();
    if (path.endswith(".txt") &&
        it->type() == llvm::sys::fs::file_type::regular_file)
      files.push_back(path.str());
  }
  if (error)
    return llvm::createStringError(error, "cannot list '%s'",
                                   source.str().c_str());
  std::sort(files.begin(), files.end());
  std::vector<CorpusFragment> fragments;
  for (const std::string &file : files) {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    if (!buffer)
      return llvm::createStringError(buffer.getError(), "cannot read '%s'",
                                     file.c_str());
    llvm::StringRef text = (*buffer)->getBuffer();
    std::string relative =
        llvm::StringRef(file).drop_front(source.size()).ltrim('/').str();
    std::replace(relative.begin(), relative.end(), '/', '_');
    llvm::SmallString<256> target(copy);
    llvm::sys::path::append(target, relative);
    if (auto error = writeTextFile(target, text))
      return error;
    for (const retrieval::Chunk &chunk : retrieval::chunkText(text, chunking))
      fragments.push_back(
          {relative, text.substr(chunk.offset, chunk.length).str()});
  }
  if (fragments.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "corpus '%s' has no .txt text",
                                   source.str().c_str());
  return fragments;
}

/// `count` consecutive words of `text` from a random place: the key words
/// of a question whose answer is (mostly) in that fragment. Only these
/// words go to retrieval, so the question's fixed wording cannot pull the
/// same fragment into every query.
std::string keyWordsFrom(llvm::StringRef text, size_t count,
                         std::mt19937_64 &random) {
  llvm::SmallVector<llvm::StringRef, 64> pieces, words;
  llvm::SplitString(text, pieces, " \t\r\n");
  for (llvm::StringRef word : pieces) {
    word = word.trim("*`:=#-_.,;()[]<>\"'");
    // Words only: reST markup and code symbols make poor questions.
    if (word.size() >= 2 && llvm::all_of(word, [](char c) {
          return llvm::isAlpha(c) || c == '\'' || c == '-';
        }))
      words.push_back(word);
  }
  if (words.empty())
    return "python";
  size_t start =
      words.size() > count ? random() % (words.size() - count + 1) : 0;
  std::string keyWords;
  for (size_t i = start; i < std::min(words.size(), start + count); ++i)
    keyWords += (keyWords.empty() ? "" : " ") + words[i].lower();
  return keyWords;
}

struct Query {
  std::string question;
  std::vector<std::string> fragments;
};

std::string bulkSource(llvm::ArrayRef<Query> queries) {
  // Fragments as `let`s, each once: the source stays linear in the corpus.
  llvm::StringMap<unsigned> names;
  std::string lets, body;
  for (size_t q = 0; q < queries.size(); ++q) {
    body += "query q" + std::to_string(q) +
            " { gen(max_tokens = 1, temperature = 0) {\n  system rules\n"
            "  plus {";
    for (const std::string &fragment : queries[q].fragments) {
      auto [entry, added] = names.try_emplace(fragment, names.size());
      if (added)
        lets += "let f" + std::to_string(entry->second) + " = " +
                spanLiteral(fragment) + "\n";
      body += " fragment f" + std::to_string(entry->second);
    }
    body += " }\n  user " + spanLiteral(queries[q].question) + "\n} }\n";
  }
  return "let rules = \"Answer in one short sentence, only from the "
         "documents.\"\n" +
         lets + body;
}

struct Row {
  std::string bulk;
  unsigned size = 0, rep = 0;
  std::string config;
  double meanTtftMs = 0, medianTtftMs = 0, wallMs = 0;
  uint64_t prompt = 0, reused = 0, computed = 0;
  uint32_t preemptions = 0;
};

llvm::Error runBulk(const BenchArgs &args) {
  std::string corpus = args.setting("corpus", DefaultCorpus);
  std::string sizesSetting =
      args.setting("sizes", args.quick ? "1,8" : "1,16,64,whole");
  auto k = args.intSetting("k", 3);
  if (!k)
    return k.takeError();
  auto cacheTokens = args.intSetting("kv-cache", 2048);
  if (!cacheTokens)
    return cacheTokens.takeError();
  auto maxFiles = args.intSetting("files", args.quick ? 1 : 3);
  if (!maxFiles)
    return maxFiles.takeError();
  if (*k < 1 || *k > 16 || *cacheTokens < 1024)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--set k must be 1..16 and kv-cache at least 1024 tokens");
  const int repetitions = args.repetitionsOr(1, 1);

  // The corpus, copied to a scratch folder and indexed there.
  llvm::SmallString<128> scratch;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("spanc-bulk", scratch))
    return llvm::createStringError(error, "cannot make a scratch folder");
  struct Cleanup {
    std::string path;
    ~Cleanup() { llvm::sys::fs::remove_directories(path); }
  } cleanup{scratch.str().str()};
  retrieval::ChunkOptions chunking = fragmentChunking();
  std::string corpusSource = corpus;
  if (*maxFiles > 0) {
    // The first files in name order: a corpus whose every fragment can be
    // a question of the whole-corpus bulk within the time budget.
    std::vector<std::string> files;
    std::error_code error;
    for (llvm::sys::fs::directory_iterator it(corpus, error), end;
         !error && it != end; it.increment(error))
      if (llvm::StringRef(it->path()).endswith(".txt"))
        files.push_back(it->path());
    std::sort(files.begin(), files.end());
    llvm::SmallString<128> subset(scratch);
    llvm::sys::path::append(subset, "source");
    for (size_t i = 0; i < files.size() && i < size_t(*maxFiles); ++i) {
      auto buffer = llvm::MemoryBuffer::getFile(files[i]);
      if (!buffer)
        return llvm::createStringError(buffer.getError(), "cannot read '%s'",
                                       files[i].c_str());
      llvm::SmallString<256> target(subset);
      llvm::sys::path::append(target, llvm::sys::path::filename(files[i]));
      if (auto error = writeTextFile(target, (*buffer)->getBuffer()))
        return error;
    }
    corpusSource = subset.str().str();
  }
  llvm::SmallString<128> corpusCopy(scratch);
  llvm::sys::path::append(corpusCopy, "corpus");
  auto fragments = copyCorpus(corpusSource, corpusCopy, chunking);
  if (!fragments)
    return fragments.takeError();
  retrieval::IndexOptions indexOptions;
  indexOptions.chunking = chunking;
  indexOptions.indexDirectory = scratch.str().str(); // removed with it
  auto index = retrieval::CorpusIndex::open(corpusCopy, indexOptions);
  if (!index)
    return index.takeError();
  auto refreshed = (*index)->refresh();
  if (!refreshed)
    return refreshed.takeError();

  std::vector<std::pair<std::string, unsigned>> bulks;
  llvm::SmallVector<llvm::StringRef, 4> sizeNames;
  llvm::StringRef(sizesSetting).split(sizeNames, ',', -1, false);
  for (llvm::StringRef name : sizeNames) {
    unsigned size = 0;
    if (name.trim() == "whole")
      bulks.push_back({"whole", unsigned(fragments->size())});
    else if (!name.trim().getAsInteger(10, size) && size > 0)
      bulks.push_back({name.trim().str(), size});
    else
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--set sizes=%s: expected positive integers or 'whole'",
          sizesSetting.c_str());
  }

  auto session = ModelSession::load(args);
  if (!session)
    return session.takeError();
  ModelSession &model = **session;
  size_t fragmentTokens = 0;
  for (const CorpusFragment &fragment : *fragments)
    fragmentTokens += model.tokenizer().encode(fragment.text, false).size();

  std::vector<Row> rows;
  LoadSampler load;
  auto started = std::chrono::steady_clock::now();
  struct Config {
    const char *name;
    kv::CacheMode mode;
    bool bulkOrder;
  } configs[] = {{"stock", kv::CacheMode::Prefix, false},
                 {"span-fifo", kv::CacheMode::Span, false},
                 {"span-bulk-order", kv::CacheMode::Span, true}};
  // A warm-up plan outside the figures (first KV writes, weight repacking).
  {
    auto warm = model.makeExecutor(
        kv::CacheMode::Span, kv::RelocationMode::RopeInKernel, *cacheTokens);
    if (!warm)
      return warm.takeError();
    auto plan = model.compile(bulkSource({{"Warm up?", {"A warm-up."}}}));
    if (!plan)
      return plan.takeError();
    if (auto outcomes = model.run(**warm, *plan); !outcomes)
      return outcomes.takeError();
  }
  std::map<std::string, uint64_t> sharingOf;
  for (int rep = 0; rep < repetitions; ++rep)
    for (auto &[bulkName, size] : bulks) {
      std::mt19937_64 random((args.seed * 1000003 + size) * 1000 + rep);
      // Distinct source fragments in a random (written) order; for a bulk
      // larger than the corpus, fragments repeat.
      std::vector<size_t> picks;
      while (picks.size() < size) {
        std::vector<size_t> all(fragments->size());
        for (size_t i = 0; i < all.size(); ++i)
          all[i] = i;
        std::shuffle(all.begin(), all.end(), random);
        for (size_t i = 0; i < all.size() && picks.size() < size; ++i)
          picks.push_back(all[i]);
      }
      std::vector<Query> queries;
      for (size_t pick : picks) {
        Query query;
        std::string keyWords = keyWordsFrom((*fragments)[pick].text, 6, random);
        query.question =
            "What does the documentation say about " + keyWords + "?";
        auto retrieved = (*index)->retrieve(keyWords, unsigned(*k));
        if (!retrieved)
          return retrieved.takeError();
        for (const retrieval::Fragment &fragment : *retrieved)
          query.fragments.push_back(fragment.text);
        if (query.fragments.empty())
          query.fragments.push_back((*fragments)[pick].text);
        queries.push_back(std::move(query));
      }
      // How many queries share a fragment with another (locality to win).
      llvm::StringMap<unsigned> uses;
      for (const Query &query : queries)
        for (const std::string &fragment : query.fragments)
          ++uses[fragment];
      uint64_t sharing = 0;
      for (const Query &query : queries)
        sharing += llvm::any_of(
            query.fragments, [&](const std::string &f) { return uses[f] > 1; });
      if (rep == 0)
        sharingOf[bulkName] = sharing;
      std::string source = bulkSource(queries);
      for (const Config &config : configs) {
        std::vector<std::string> skip;
        if (!config.bulkOrder)
          skip.push_back("bulk-order");
        auto plan = model.compileSkipping(source, skip);
        if (!plan)
          return plan.takeError();
        // A fresh cache per run: each configuration starts cold.
        auto executor = model.makeExecutor(
            config.mode, kv::RelocationMode::RopeInKernel, *cacheTokens);
        if (!executor)
          return executor.takeError();
        auto begin = std::chrono::steady_clock::now();
        auto outcomes = model.run(**executor, *plan);
        if (!outcomes)
          return outcomes.takeError();
        Row row;
        row.bulk = bulkName;
        row.size = size;
        row.rep = unsigned(rep);
        row.config = config.name;
        row.wallMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - begin)
                         .count();
        std::vector<double> ttfts;
        for (const sched::CallOutcome &outcome : *outcomes) {
          ttfts.push_back(1e3 * outcome.stats.ttftSeconds);
          row.prompt += outcome.stats.promptTokens;
          row.reused += outcome.stats.reusedTokens;
          row.computed += outcome.stats.computedTokens;
          row.preemptions += outcome.stats.preemptions;
        }
        Summary summary = summarize(ttfts);
        row.meanTtftMs = summary.mean;
        row.medianTtftMs = summary.median;
        llvm::errs() << printed(
            "bulk: %-6s (%4u queries, %4llu sharing) rep %u %-16s mean ttft "
            "%9.1f ms, hit %5.1f%% of %llu prompt tokens, %.1f s\n",
            bulkName.c_str(), size, (unsigned long long)sharing, row.rep,
            row.config.c_str(), row.meanTtftMs,
            row.prompt ? 100.0 * double(row.reused) / double(row.prompt) : 0.0,
            (unsigned long long)row.prompt, row.wallMs / 1e3);
        rows.push_back(std::move(row));
      }
    }
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::string loadLine = load.stopAndDescribe();

  // --- bulk.tsv --------------------------------------------------------
  std::string tsv = "bulk\tsize\trep\tconfig\tmean_ttft_ms\tmedian_ttft_ms\t"
                    "wall_ms\tprompt\treused\tcomputed\tpreemptions\n";
  for (const Row &row : rows)
    tsv +=
        printed("%s\t%u\t%u\t%s\t%.3f\t%.3f\t%.1f\t%llu\t%llu\t%llu\t%u\n",
                row.bulk.c_str(), row.size, row.rep, row.config.c_str(),
                row.meanTtftMs, row.medianTtftMs, row.wallMs,
                (unsigned long long)row.prompt, (unsigned long long)row.reused,
                (unsigned long long)row.computed, row.preemptions);
  if (auto error = writeTextFile(resultPath(args, ".tsv"), tsv))
    return error;

  // --- bulk.md ---------------------------------------------------------
  auto select = [&](llvm::StringRef bulk, llvm::StringRef config) {
    std::vector<const Row *> selected;
    for (const Row &row : rows)
      if (row.bulk == bulk && row.config == config)
        selected.push_back(&row);
    return selected;
  };
  auto meanTtfts = [&](llvm::StringRef bulk, llvm::StringRef config) {
    std::vector<double> values;
    for (const Row *row : select(bulk, config))
      values.push_back(row->meanTtftMs);
    return values;
  };
  auto medianMean = [&](llvm::StringRef bulk, llvm::StringRef config) {
    std::vector<double> values = meanTtfts(bulk, config);
    return values.empty() ? 0.0 : summarize(values).median;
  };
  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# Bulk temporal locality: mean TTFT of a bulk of RAG questions, "
         "bulk-order on/off vs stock\n\n"
      << "Generated by `spanc bench bulk" << commandLine(args)
      << "` (bench/bulk/BulkBench.cpp) on " << timestampNow() << " in "
      << printed("%.0f", elapsed) << " s.\n\n## Setup\n\n"
      << "- Model: " << model.describeModel() << ", default GEMMs, "
      << omp_get_max_threads() << " threads, rope-in-kernel.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine << " (a shared machine).\n"
      << "- Corpus: `" << corpus << "`"
      << (*maxFiles > 0
              ? printed(" (its first %lld file(s))", (long long)*maxFiles)
              : std::string())
      << " (Debian's python3.11-doc: the Python documentation's reST "
         "sources), chunked by retrieval/'s chunker (max "
      << chunking.maxBytes << " bytes, overlap " << chunking.overlapBytes
      << ") into " << fragments->size() << " fragments of "
      << printed("%.0f", double(fragmentTokens) / fragments->size())
      << " tokens on average, indexed with the project's corpus index "
         "(SQLite FTS5, BM25).\n"
      << "- A bulk of B questions: B fragments drawn at random (without "
         "repetition while the corpus lasts), each giving six consecutive "
         "words of it as key words (BM25 searches these) and the question "
         "\"What does the documentation say about <key words>?\"; each "
         "query is `system rules; plus { top-"
      << *k
      << " BM25 fragments }; user question` with max_tokens = 1 (TTFT "
         "only), all B queries in one module, run as one plan (continuous "
         "batching, 512-token steps). TTFT counts from the bulk's start, "
         "so it includes queueing: mean TTFT is what the bulk's order "
         "decides.\n"
      << "- `stock`: --cache=prefix in the written (random) order; "
         "`span-fifo`: --cache=span with bulk-order skipped; "
         "`span-bulk-order`: --cache=span, default pipeline (bulk-order "
         "places queries sharing fragments next to each other). A new, "
         "empty cache per run.\n"
      << "- KV cache: **" << *cacheTokens << " tokens** (about "
      << (*cacheTokens / (*k * 100 + 60))
      << " queries' prompts), so fragments fall out of the cache unless "
         "the queries that share them run close together: the paper's "
         "point.\n"
      << "- Scaled for a 2-core CPU: bulk sizes ";
  for (size_t i = 0; i < bulks.size(); ++i)
    out << (i ? ", " : "") << bulks[i].first
        << (bulks[i].first == "whole" ? printed(" (%u)", bulks[i].second)
                                      : std::string());
  out << " (the paper: 1, 64, 1 024 and the whole corpus; stock prefills "
         "every prompt, ~"
      << (*k * 100 + 60) << " tokens a query, so the corpus is "
      << fragments->size()
      << " fragments, not all 12 MB of the documentation), " << repetitions
      << " repetition(s).\n\n"
      << "## Mean TTFT over the bulk (ms) and prompt tokens reused\n\n"
      << "| bulk | queries sharing a fragment | stock | span-fifo | "
         "span-bulk-order | hit stock / fifo / bulk-order | speedup fifo | "
         "speedup bulk-order |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (auto &[bulkName, size] : bulks) {
    (void)size;
    out << "| " << bulkName << printed(" (%u)", size) << " | ";
    // Counted on repetition 0's bulk.
    out << sharingOf[bulkName] << " |";
    for (const char *config : {"stock", "span-fifo", "span-bulk-order"}) {
      std::vector<double> values = meanTtfts(bulkName, config);
      out << " " << (values.empty() ? "—" : formatSpread(summarize(values), 0))
          << " |";
    }
    out << " ";
    for (const char *config : {"stock", "span-fifo", "span-bulk-order"}) {
      std::vector<const Row *> selected = select(bulkName, config);
      double hit = 0;
      if (!selected.empty() && selected[0]->prompt)
        hit = 100.0 * double(selected[0]->reused) / double(selected[0]->prompt);
      out << printed("%.0f%%", hit)
          << (llvm::StringRef(config) == "span-bulk-order" ? "" : " / ");
    }
    double stock = medianMean(bulkName, "stock");
    out << " | " << formatRatio(stock, medianMean(bulkName, "span-fifo"))
        << " | " << formatRatio(stock, medianMean(bulkName, "span-bulk-order"))
        << " |\n";
  }
  out << "\nSpeedup = stock mean TTFT / mean TTFT (median over repetitions). "
         "The paper: 1.03–1.59× (bulk-order on vs off at its scale). "
         "Between bulk-order and FIFO:";
  for (auto &[bulkName, size] : bulks) {
    (void)size;
    out << " " << bulkName << " "
        << formatRatio(medianMean(bulkName, "span-fifo"),
                       medianMean(bulkName, "span-bulk-order"));
  }
  out << ".\n\nRaw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/bulk/plot.py).\n";
  out.flush();

  return finishResults(args, std::move(md));
}

BenchRegistration registration{
    {"bulk",
     "bulk temporal locality on the Python docs: mean TTFT, bulk-order "
     "on/off vs stock",
     "  corpus=/usr/share/doc/python3.11/html/_sources/tutorial: a folder "
     "of .txt files\n"
     "  files=3: only the first N files in name order, 0: all (--quick: 1)\n"
     "  sizes=1,16,64,whole: bulk sizes (--quick: 1,8)\n"
     "  k=3: fragments retrieved per question\n"
     "  kv-cache=2048: KV cache tokens (small, so order matters)\n",
     runBulk}};

} // namespace

} // namespace spanc::bench
