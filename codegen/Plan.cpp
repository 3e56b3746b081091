//===- Plan.cpp - The physical plan and its printer -----------------------===//

#include "codegen/Plan.h"

#include "llvm/Support/Format.h"

namespace spanc::codegen {

std::optional<std::vector<TokenId>>
resolveSegment(const PlanSegment &segment,
               llvm::ArrayRef<std::optional<std::vector<TokenId>>> outputs) {
  std::vector<TokenId> tokens;
  for (const Piece &piece : segment.pieces) {
    tokens.insert(tokens.end(), piece.tokens.begin(), piece.tokens.end());
    if (!piece.call)
      continue;
    if (*piece.call >= outputs.size() || !outputs[*piece.call])
      return std::nullopt;
    const std::vector<TokenId> &output = *outputs[*piece.call];
    tokens.insert(tokens.end(), output.begin(), output.end());
    tokens.insert(tokens.end(), piece.trailer.begin(), piece.trailer.end());
  }
  return tokens;
}

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

/// Lays out a call whose tokens are all known through the real KV cache
/// manager on a scratch pool, so the printed positions, blocks and hashes
/// are exactly what the runtime will use.
void printLayout(const Call &call, llvm::ArrayRef<kv::Segment> segments,
                 const kv::BlockHasher &hasher, const PlanPrintOptions &options,
                 llvm::raw_ostream &os) {
  size_t numTokens = 0;
  for (const kv::Segment &segment : segments)
    numTokens += segment.tokens.size();
  uint32_t numBlocks =
      uint32_t(numTokens / options.blockSize + segments.size() + 2);
  kv::BlockPool pool(numBlocks, options.blockSize);
  kv::KvCacheManager manager(pool, hasher, options.cacheMode,
                             kv::RelocationMode::Rerope);
  kv::AdmitResult admitted = manager.admit(call.id, segments);
  if (admitted.status != kv::AdmitStatus::Admitted) {
    os << "    layout: " << admitted.reason << "\n";
    return;
  }
  const kv::RequestPlan &plan = manager.plan(call.id);
  for (const kv::SegmentPlan &segment : plan.segments) {
    os << "    " << kv::segmentKindName(segment.kind) << " tokens "
       << segment.numTokens << " positions [" << segment.firstPosition << ", "
       << segment.firstPosition + segment.numTokens << ") blocks "
       << segment.numBlocks << "\n";
    for (uint32_t b = 0; b < segment.numBlocks; ++b) {
      const kv::LogicalBlock &block = plan.blocks[segment.firstBlock + b];
      os << "      block " << segment.firstBlock + b << " @" << block.position
         << " tokens " << block.numTokens;
      if (block.numTokens < options.blockSize)
        os << " (+" << options.blockSize - block.numTokens << " padding)";
      os << " hash " << block.hash.str() << "\n";
    }
  }
  manager.release(call.id);
}

} // namespace

void printPlan(const Plan &plan, const kv::BlockHasher &hasher,
               const PlanPrintOptions &options, llvm::raw_ostream &os) {
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

    std::vector<kv::Segment> resolved;
    bool known = true;
    for (const PlanSegment &segment : call.segments) {
      os << "  " << kv::segmentKindName(segment.kind) << ":";
      for (const Piece &piece : segment.pieces) {
        os << " " << (piece.label.empty() ? "tokens" : piece.label) << "=";
        printTokens(piece.tokens, options.printTokens, os);
        if (piece.call) {
          os << "+<output of #" << *piece.call << ">+";
          printTokens(piece.trailer, options.printTokens, os);
        }
      }
      os << "\n";
      std::optional<std::vector<TokenId>> tokens = resolveSegment(segment, {});
      if (!tokens)
        known = false;
      else if (known)
        resolved.push_back({segment.kind, std::move(*tokens)});
    }
    if (known)
      printLayout(call, resolved, hasher, options, os);
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

} // namespace spanc::codegen
