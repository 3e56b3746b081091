//===- KvPlanPrinter.cpp - Request plans and call layouts as text ---------===//
//
// What `spanc compile --emit=plan` and logs print of a request's layout:
// segments, positions, blocks, hashes, page lists and the pages read scaled.
// Declared in KvCacheManager.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/kv/KvCacheManager.h"

#include "llvm/Support/Format.h"

#include <algorithm>

namespace spanc::kv {

void printRequestPlan(llvm::raw_ostream &os, const RequestPlan &plan) {
  for (uint32_t index = 0; index < plan.segments.size(); ++index) {
    const SegmentPlan &segment = plan.segments[index];
    os << "segment " << index << " "
       << (segment.guided     ? "guided"
           : segment.blend    ? "blend"
           : segment.boundary ? "boundary"
                              : segmentKindName(segment.kind))
       << ": tokens [" << segment.firstToken << ", "
       << segment.firstToken + segment.numTokens << ") positions ["
       << segment.firstPosition << ", "
       << segment.firstPosition + segment.numTokens << ") blocks ["
       << segment.firstBlock << ", " << segment.firstBlock + segment.numBlocks
       << ") context segments [0, " << segment.contextSegments << ") parent "
       << segment.parentHash.str() << "\n";
    for (uint32_t block = segment.firstBlock;
         block < segment.firstBlock + segment.numBlocks; ++block) {
      const LogicalBlock &logical = plan.blocks[block];
      os << "  block " << block << ": " << logical.numTokens
         << " tokens at positions [" << logical.position << ", "
         << logical.position + logical.numTokens << ") hash "
         << logical.hash.str();
      if (logical.block != InvalidBlock)
        os << " -> #" << logical.block << (logical.reused ? " (hit)" : "");
      os << "\n";
    }
    os << "  pages:";
    for (uint32_t page : segment.pages)
      os << " " << page;
    os << "\n";
  }
}

void printCallLayout(llvm::ArrayRef<Segment> segments,
                     const BlockHasher &hasher, CacheMode cacheMode,
                     const SpanOptions &spanOptions, unsigned blockSize,
                     llvm::raw_ostream &os) {
  size_t numTokens = 0;
  for (const Segment &segment : segments)
    numTokens += segment.tokens.size();
  uint64_t numBlocks =
      2 * (numTokens / blockSize + segments.size()) + 2; // heads recomputed
  BlockPool pool(uint32_t(std::min<uint64_t>(numBlocks, UINT32_MAX / 2)),
                 blockSize);
  KvCacheManager manager(pool, hasher, cacheMode, RelocationMode::Rerope,
                         spanOptions);
  const RequestId id = 1;
  AdmitResult admitted = manager.admit(id, segments);
  if (admitted.status != AdmitStatus::Admitted) {
    os << "    layout: " << admitted.reason << "\n";
    return;
  }
  const RequestPlan &plan = manager.plan(id);
  for (const SegmentPlan &segment : plan.segments) {
    os << "    "
       << (segment.guided     ? "guided"
           : segment.blend    ? "blend"
           : segment.boundary ? "boundary"
                              : segmentKindName(segment.kind))
       << " tokens " << segment.numTokens << " positions ["
       << segment.firstPosition << ", "
       << segment.firstPosition + segment.numTokens << ") blocks "
       << segment.numBlocks << " context ";
    if (segment.contextSegments == 0)
      os << "none";
    else
      os << "segments [0, " << segment.contextSegments << ") tokens "
         << segment.contextTokens;
    os << " parent " << segment.parentHash.str() << "\n";
    llvm::SmallVector<uint32_t, 16> scaled;
    for (uint32_t page : segment.pages)
      if (readsScaled(plan, segment, page, spanOptions))
        scaled.push_back(page);
    if (!scaled.empty()) {
      os << "      reads scaled (temperature "
         << llvm::format("%g", double(spanOptions.temperature))
         << ", mass scale " << llvm::format("%g", double(spanOptions.massScale))
         << "): blocks";
      for (uint32_t page : scaled)
        os << " " << page;
      os << "\n";
    }
    for (uint32_t b = 0; b < segment.numBlocks; ++b) {
      const LogicalBlock &block = plan.blocks[segment.firstBlock + b];
      os << "      block " << segment.firstBlock + b << " @" << block.position;
      if (block.computePosition != block.position)
        os << " (computed @" << block.computePosition << ")";
      os << " tokens " << block.numTokens;
      if (block.blendSource != UINT32_MAX)
        os << " blends " << block.blendSource
           << (block.blendForced                         ? " (all recomputed)"
               : block.repairCandidate && segment.guided ? " (candidate)"
                                                         : "");
      if (block.numTokens < blockSize)
        os << " (+" << blockSize - block.numTokens << " padding)";
      os << " hash " << block.hash.str() << "\n";
    }
  }
  manager.release(id);
}

} // namespace spanc::kv
