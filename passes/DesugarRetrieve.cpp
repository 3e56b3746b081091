//===- DesugarRetrieve.cpp - R -> +(F...) by BM25 at compile time ---------===//
//
// span.retrieve {corpus, k} query "text" becomes a + of the k fragments the
// corpus index ranks best for the text (retrieval/: SQLite FTS5,
// BM25, best first, ties by file then offset), each a span.fragment that
// says where it came from {corpus, file, offset}. The corpus's index (in
// the index folder, never in the corpus) is built or refreshed first (only
// changed files are re-chunked).
//
// A relative corpus path is looked up beside the program first, like
// file("..."), then in the working folder, so `corpus = "examples/corpus"`
// works from the repository root. Either way the folder must really lie
// where the read policy allows (the program's folder, --allow-read), as
// file("...") must, and its links are followed only that far. A corpus
// that cannot be found, read or allowed is an error at the retrieve.
//
// A program from the network (spanc serve) names corpora, never folders:
// its retrieve's corpus must be a name the server was given with --corpus
// NAME=DIR (PassOptions::corpora, indexed when the server started), and
// anything else is an error naming the corpus.
//
// With --prepare-fragments the query also warms the cache: the value it
// yields becomes seq(monad(par(G¹(F1), G¹(F2), ...)), value), one gen with
// max_tokens = 1, temperature = 0 per fragment, run ahead of the query for
// their cache effect only.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "retrieval/CorpusCatalog.h"
#include "retrieval/CorpusIndex.h"
#include "support/FileAccess.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace spanc::passes {

namespace {

using ir::Op;
using ir::OpKind;

class DesugarRetrievePass : public Pass {
public:
  bool run(ir::Module &module, PassContext &context) override {
    bool ok = true;
    llvm::SmallVector<Op *, 8> retrieves;
    llvm::SmallVector<Op *, 8> warmUps;
    for (auto &query : module.getQueries()) {
      retrieves.clear();
      warmUps.clear();
      for (Op &op : query->getOps())
        if (op.getKind() == OpKind::Retrieve)
          retrieves.push_back(&op);
      for (Op *retrieve : retrieves)
        ok &= rewrite(retrieve, context, warmUps);
      if (!warmUps.empty())
        runAhead(*query, warmUps);
    }
    return ok;
  }

private:
  /// Opened and refreshed indexes, by resolved folder: a corpus is
  /// refreshed once per run however many retrieves name it.
  llvm::StringMap<std::unique_ptr<retrieval::CorpusIndex>> indexes;

  static std::string resolveCorpus(llvm::StringRef corpus, ir::Location loc) {
    if (llvm::sys::path::is_absolute(corpus))
      return corpus.str();
    llvm::StringRef programDir = llvm::sys::path::parent_path(loc.file);
    if (loc.isKnown() && !programDir.empty()) {
      llvm::SmallString<256> besideProgram(programDir);
      llvm::sys::path::append(besideProgram, corpus);
      if (llvm::sys::fs::exists(besideProgram) ||
          !llvm::sys::fs::exists(corpus))
        return std::string(besideProgram);
    }
    return corpus.str();
  }

  llvm::Expected<retrieval::CorpusIndex *>
  openIndex(const std::string &dir, PassContext &context, ir::Location loc) {
    const retrieval::IndexOptions &options = context.getOptions().corpusIndex;
    // What is wrong with the folder itself comes first.
    if (!llvm::sys::fs::exists(dir))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "corpus '" + dir + "' does not exist");
    if (!llvm::sys::fs::is_directory(dir))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "corpus '" + dir + "' is not a folder");
    llvm::Expected<std::string> allowed =
        support::confinePath(dir, options.readPolicy);
    if (!allowed)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "cannot read corpus " +
                                         llvm::toString(allowed.takeError()));
    auto found = indexes.find(*allowed);
    if (found != indexes.end())
      return found->second.get();
    auto index = retrieval::CorpusIndex::open(*allowed, options);
    if (!index)
      return index.takeError();
    auto stats = (*index)->refresh(context.getOptions().stopRequested);
    if (!stats)
      return stats.takeError();
    if (stats->linksSkipped)
      context.getDiagnostics().warning(
          loc, "corpus '" + dir + "': " + llvm::Twine(stats->linksSkipped) +
                   " link(s) to files outside the folders this program may "
                   "read were skipped");
    retrieval::CorpusIndex *result = index->get();
    indexes[*allowed] = std::move(*index);
    return result;
  }

  /// The k fragments of `corpus` best for the retrieve's text: from the
  /// server's named corpora for a network program, else from the folder.
  llvm::Expected<std::vector<retrieval::Fragment>>
  search(llvm::StringRef corpus, const Op *retrieve, unsigned k,
         PassContext &context) {
    if (const retrieval::CorpusCatalog *corpora =
            context.getOptions().corpora) {
      if (!corpora->find(corpus))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "corpus '" + corpus.str() +
                "' is not served here: a program sent over the network "
                "may retrieve only from the corpora the server was given "
                "(--corpus NAME=DIR): " +
                (corpora->empty() ? std::string("none") : corpora->names()));
      return corpora->retrieve(corpus, retrieve->getText(), k);
    }
    auto index = openIndex(resolveCorpus(corpus, retrieve->getLoc()), context,
                           retrieve->getLoc());
    if (!index)
      return index.takeError();
    return (*index)->retrieve(retrieve->getText(), k);
  }

  bool rewrite(Op *retrieve, PassContext &context,
               llvm::SmallVectorImpl<Op *> &warmUps) {
    llvm::StringRef corpus = retrieve->getStringAttr("corpus").value_or("");
    int64_t k = retrieve->getIntAttr("k").value_or(0);
    if (corpus.empty() || k < 1) {
      context.getDiagnostics().error(retrieve->getLoc(),
                                     "retrieve needs a corpus and k >= 1");
      return false;
    }
    auto fragments =
        search(corpus, retrieve, static_cast<unsigned>(k), context);
    if (!fragments) {
      context.getDiagnostics().error(retrieve->getLoc(),
                                     llvm::toString(fragments.takeError()));
      return false;
    }

    ir::Builder builder;
    builder.setInsertionPoint(retrieve);
    builder.setLoc(retrieve->getLoc());
    llvm::SmallVector<Op *, 8> spans;
    for (const retrieval::Fragment &fragment : *fragments)
      spans.push_back(builder.createFragment(
          fragment.text,
          {{"corpus", ir::Attribute(corpus)},
           {"file", ir::Attribute(fragment.path)},
           {"offset", ir::Attribute(static_cast<int64_t>(fragment.offset))}}));
    // No fragment matched: the documents are an empty span (a plus needs
    // an operand), and the gen runs without them; say so.
    if (spans.empty())
      context.getDiagnostics().warning(
          retrieve->getLoc(), "retrieve found no fragment of '" + corpus +
                                  "' for this query; the call runs without "
                                  "documents");
    Op *plus =
        spans.empty() ? builder.createCross({}) : builder.createPlus(spans);
    if (context.getOptions().prepareFragments && !spans.empty()) {
      llvm::SmallVector<Op *, 8> calls;
      for (Op *span : spans)
        calls.push_back(
            builder.createGen(span, {{"max_tokens", ir::Attribute(int64_t(1))},
                                     {"temperature", ir::Attribute(0.0)}}));
      warmUps.push_back(builder.createMonad(builder.createPar(calls)));
    }
    // Last: the builder inserts before the retrieve.
    retrieve->replaceAllUsesWith(plus);
    retrieve->erase();
    return true;
  }

  /// Makes the query yield seq(warm-ups..., its value).
  static void runAhead(ir::Query &query, llvm::ArrayRef<Op *> warmUps) {
    Op *yield = query.getYield();
    if (!yield || yield->getNumOperands() != 1 || !yield->getOperand(0))
      return; // The verifier reports a query without a proper yield.
    ir::Builder builder;
    builder.setInsertionPoint(yield);
    builder.setLoc(yield->getOperand(0)->getLoc());
    llvm::SmallVector<Op *, 8> steps(warmUps.begin(), warmUps.end());
    steps.push_back(yield->getOperand(0));
    yield->setOperand(0, builder.createSeq(steps));
  }
};

} // namespace

std::unique_ptr<Pass> createDesugarRetrievePass() {
  return std::make_unique<DesugarRetrievePass>();
}

static PassRegistration registration(
    "desugar-retrieve",
    "retrieve -> + of the top-k corpus fragments by BM25 (builds the index; "
    "--prepare-fragments adds max_tokens=1 warm-up gens)",
    createDesugarRetrievePass);

} // namespace spanc::passes
