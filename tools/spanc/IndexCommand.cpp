//===- IndexCommand.cpp - spanc index -------------------------------------===//

#include "retrieval/CorpusIndex.h"
#include "tools/spanc/CommandLine.h"
#include "tools/spanc/CompileOptions.h"
#include "tools/spanc/Interrupt.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

int runIndex(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                   //
      ("input", po::value<std::string>()->required(), "corpus folder")    //
      ("query,q", po::value<std::string>(),                               //
       "after refreshing, print the fragments that best match this text") //
      ("top,k", po::value<int64_t>()->default_value(4),                   //
       "how many fragments --query prints, 1..1000");
  addFileAccessOptions(options);
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "index", "spanc index DIR [--query TEXT [-k N]] [--index-dir DIR]",
      "Chunks the .txt/.md files of a corpus folder into fragments (by\n"
      "paragraph, with a size cap and overlap) and indexes them with SQLite\n"
      "FTS5 (BM25). The index is a file in the index folder (--index-dir;\n"
      "by default ~/.cache/spanc/index), never in the corpus. Only files\n"
      "whose content changed are re-chunked; fragments of deleted files are\n"
      "removed and the space they took is given back.\n"
      "Links are followed only to files inside DIR or an --allow-read\n"
      "folder; a file must be text (no NUL byte) of at most --max-file-size\n"
      "bytes, and the corpus at most --max-corpus-fragments fragments.\n"
      "SIGINT or SIGTERM stops between two files and leaves the index as\n"
      "it was (exit 130 or 143).\n"
      "With --query, prints the top fragments for that text, best first.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  // Read signed, so that -1 is reported as given (not as 4294967295).
  const int64_t top = parsed.values["top"].as<int64_t>();
  if (top < 1 || top > 1000)
    return reportError("index", "--top " + std::to_string(top) +
                                    ": must be in [1, 1000]");
  deferInterrupts();

  std::string directory = parsed.values["input"].as<std::string>();
  retrieval::IndexOptions indexOptions;
  if (!readFileAccessOptions("index", parsed.values, indexOptions))
    return 1;
  auto index = retrieval::CorpusIndex::open(directory, indexOptions);
  if (!index)
    return reportError("index", llvm::toString(index.takeError()));
  auto stats = (*index)->refresh(interruptRequested);
  if (interruptRequested()) {
    if (!stats)
      llvm::consumeError(stats.takeError());
    return reportInterrupted("index",
                             "the index of '" + directory + "' is as it was");
  }
  if (!stats)
    return reportError("index", llvm::toString(stats.takeError()));

  llvm::outs() << "indexed " << directory << ": " << stats->filesAdded
               << " added, " << stats->filesChanged << " changed, "
               << stats->filesUnchanged << " unchanged, " << stats->filesRemoved
               << " removed; " << stats->fragmentsWritten
               << " fragments written, " << stats->fragmentsTotal << " in "
               << (*index)->indexPath() << "\n";
  if (stats->linksSkipped)
    llvm::outs() << "skipped " << stats->linksSkipped
                 << " link(s) to files outside " << directory
                 << " and the --allow-read folders\n";
  if (stats->compacted)
    llvm::outs() << "compacted the index (space of removed fragments given "
                    "back)\n";

  if (!parsed.values.count("query"))
    return 0;
  std::string query = parsed.values["query"].as<std::string>();
  auto fragments = (*index)->retrieve(query, unsigned(top));
  if (!fragments)
    return reportError("index", llvm::toString(fragments.takeError()));
  unsigned rank = 0;
  for (const retrieval::Fragment &fragment : *fragments) {
    llvm::outs() << ++rank << ". " << fragment.path << ":" << fragment.offset
                 << "+" << fragment.length
                 << llvm::format(" score=%.4f", fragment.score) << "\n";
    llvm::StringRef rest = fragment.text;
    while (!rest.empty()) {
      auto [line, next] = rest.split('\n');
      llvm::outs() << "   " << line << "\n";
      rest = next;
    }
  }
  return 0;
}

} // namespace spanc::cli
