//===- PlanPrinter.cpp - The plan as text ---------------------------------===//

#include "plan/PlanPrinter.h"

#include "llvm/Support/Format.h"

namespace spanc::plan {

namespace {

void printTokens(llvm::ArrayRef<TokenId> tokens, bool all,
                 llvm::raw_ostream &os) {
  constexpr size_t kShown = 8;
  os << "[";
  for (size_t i = 0; i < tokens.size() && (all || i < kShown); ++i)
    os << (i ? " " : "") << tokens[i];
  if (!all && tokens.size() > kShown)
    os << " ...";
  os << "]";
}

void printOptions(const GenOptions &options, llvm::raw_ostream &os) {
  os << "{max_tokens = " << options.maxTokens
     << ", temperature = " << llvm::format("%g", options.temperature);
  if (options.topP != 1.0)
    os << ", top_p = " << llvm::format("%g", options.topP);
  if (options.topK != 0)
    os << ", top_k = " << options.topK;
  os << ", seed = " << options.seed;
  for (const std::string &stop : options.stop)
    os << ", stop = \"" << stop << "\"";
  os << "}";
}

} // namespace

void printPlan(const Plan &plan, const PlanPrintOptions &options,
               LayoutPrinter printLayout, llvm::raw_ostream &os) {
  os << "plan {calls = " << plan.calls.size()
     << ", block_size = " << options.blockSize << "}\n";
  for (const Call &call : plan.calls) {
    os << "call #" << call.id << " @" << call.query;
    if (call.cacheOnly)
      os << " cache-only";
    os << " ";
    printOptions(call.options, os);
    if (!call.dependencies.empty()) {
      os << " after";
      for (CallId dependency : call.dependencies)
        os << " #" << dependency;
    }
    if (!call.location.empty())
      os << " loc(" << call.location << ")";
    os << "\n";

    for (const PlanSegment &segment : call.segments) {
      os << "  " << segmentKindName(segment.kind)
         << (segment.ownContext ? " (own context)" : "") << ":";
      for (const Piece &piece : segment.pieces) {
        os << " " << (piece.label.empty() ? "tokens" : piece.label) << "=";
        printTokens(piece.tokens, options.printTokens, os);
        if (piece.call) {
          os << "+<output of #" << *piece.call << ">+";
          printTokens(piece.trailer, options.printTokens, os);
        }
      }
      os << "\n";
    }
    if (std::optional<std::vector<Segment>> resolved = resolveCall(call, {}))
      printLayout(call, *resolved, os);
    else
      os << "    layout: at run time (splices call outputs)\n";
  }
  for (const QueryPlan &query : plan.queries) {
    os << "query @" << query.name << " calls [";
    for (size_t i = 0; i < query.calls.size(); ++i)
      os << (i ? " " : "") << "#" << query.calls[i];
    os << "] result [";
    for (size_t i = 0; i < query.results.size(); ++i) {
      os << (i ? ", " : "");
      if (query.results[i].call)
        os << "#" << *query.results[i].call;
      else
        os << "\"" << query.results[i].text << "\"";
    }
    os << "]\n";
  }
}

} // namespace spanc::plan
