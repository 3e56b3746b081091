//===- KvCacheManager.cpp - Per-request block tables over the block pool --===//

#include "runtime/kv/KvCacheManager.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>

namespace spanc::kv {

const char *segmentKindName(SegmentKind kind) {
  switch (kind) {
  case SegmentKind::Prefix:
    return "prefix";
  case SegmentKind::Span:
    return "span";
  case SegmentKind::Tail:
    return "tail";
  }
  return "?";
}

llvm::Expected<CacheMode> parseCacheMode(llvm::StringRef text) {
  if (text == "span")
    return CacheMode::Span;
  if (text == "prefix")
    return CacheMode::Prefix;
  if (text == "off")
    return CacheMode::Off;
  return llvm::createStringError(std::errc::invalid_argument,
                                 "--cache '%s': expected span, prefix or off",
                                 text.str().c_str());
}

llvm::Expected<RelocationMode> parseRelocationMode(llvm::StringRef text) {
  if (text == "rerope")
    return RelocationMode::Rerope;
  if (text == "rope-in-kernel")
    return RelocationMode::RopeInKernel;
  return llvm::createStringError(
      std::errc::invalid_argument,
      "--relocation '%s': expected rerope or rope-in-kernel",
      text.str().c_str());
}

struct KvCacheManager::RequestState {
  RequestPlan plan;
  /// Relocations waiting for the next planStep.
  llvm::SmallVector<RelocationRequest, 8> relocations;
  uint32_t numPromptBlocks = 0;
  bool pending = true;    ///< admitted, planStep not yet run
  bool committed = false; ///< prefill K/V computed
  /// Hashes of the prompt blocks it computes, in inFlight_ until committed.
  llvm::SmallVector<BlockHash, 16> inFlight;
};

KvCacheManager::KvCacheManager(BlockPool &pool, BlockHasher hasher,
                               CacheMode cacheMode,
                               RelocationMode relocationMode)
    : pool_(pool), hasher_(std::move(hasher)), cacheMode_(cacheMode),
      relocationMode_(relocationMode) {}

KvCacheManager::~KvCacheManager() = default;

KvCacheManager::RequestState &KvCacheManager::state(RequestId id) {
  auto found = requests_.find(id);
  if (found == requests_.end())
    llvm::report_fatal_error("KvCacheManager: unknown request " +
                             llvm::Twine(id));
  return *found->second;
}

const KvCacheManager::RequestState &KvCacheManager::state(RequestId id) const {
  return const_cast<KvCacheManager *>(this)->state(id);
}

bool KvCacheManager::contains(RequestId id) const {
  return requests_.count(id) != 0;
}

const RequestPlan &KvCacheManager::plan(RequestId id) const {
  return state(id).plan;
}

namespace {

AdmitResult reject(const llvm::Twine &reason) {
  return {AdmitStatus::Reject, reason.str()};
}

} // namespace

llvm::Expected<RequestPlan> layoutRequest(llvm::ArrayRef<Segment> segments,
                                          CacheMode cacheMode,
                                          unsigned blockSize,
                                          const BlockHasher &hasher) {
  auto invalid = [](const llvm::Twine &message) {
    return llvm::createStringError(std::errc::invalid_argument, "%s",
                                   message.str().c_str());
  };
  if (blockSize == 0)
    return invalid("block size is 0");
  if (segments.empty())
    return invalid("no segments");
  for (size_t index = 0; index < segments.size(); ++index) {
    const Segment &segment = segments[index];
    if (segment.tokens.empty())
      return invalid("segment " + llvm::Twine(index) + " (" +
                     segmentKindName(segment.kind) + ") has no tokens");
    if (segment.kind == SegmentKind::Prefix && index != 0)
      return invalid("segment " + llvm::Twine(index) +
                     " is a prefix but only the first segment may be one");
  }
  if (segments.back().kind == SegmentKind::Span)
    return invalid("the last segment (" + llvm::Twine(segments.size() - 1) +
                   ") is a span; the tokens that produce the first generated "
                   "token must see the whole context (end with a tail)");

  RequestPlan plan;
  // Stock prefix caching and no caching see one causal sequence.
  llvm::SmallVector<Segment, 1> flattened;
  if (cacheMode != CacheMode::Span) {
    flattened.emplace_back();
    for (const Segment &segment : segments)
      flattened[0].tokens.insert(flattened[0].tokens.end(),
                                 segment.tokens.begin(), segment.tokens.end());
    segments = flattened;
  }
  BlockHash context = hasher.root();
  int64_t position = 0;
  for (uint32_t index = 0; index < segments.size(); ++index) {
    const Segment &segment = segments[index];
    SegmentPlan segmentPlan;
    segmentPlan.kind = segment.kind;
    segmentPlan.firstToken = uint32_t(plan.tokens.size());
    segmentPlan.numTokens = uint32_t(segment.tokens.size());
    segmentPlan.firstPosition = position;
    segmentPlan.firstBlock = uint32_t(plan.blocks.size());
    const bool isSpan = segment.kind == SegmentKind::Span;
    BlockHash parent = isSpan ? hasher.root() : context;
    segmentPlan.parentHash = parent;
    llvm::ArrayRef<TokenId> tokens = segment.tokens;
    for (size_t start = 0; start < tokens.size(); start += blockSize) {
      size_t count = std::min<size_t>(blockSize, tokens.size() - start);
      LogicalBlock block;
      block.segment = index;
      block.firstToken = segmentPlan.firstToken + uint32_t(start);
      block.numTokens = uint32_t(count);
      block.position = position + int64_t(start);
      block.hash = hasher.hashBlock(parent, tokens.slice(start, count));
      parent = block.hash;
      plan.blocks.push_back(block);
    }
    segmentPlan.numBlocks =
        uint32_t(plan.blocks.size()) - segmentPlan.firstBlock;
    if (!isSpan)
      for (uint32_t block = 0; block < segmentPlan.firstBlock; ++block)
        segmentPlan.pages.push_back(block);
    for (uint32_t block = segmentPlan.firstBlock; block < plan.blocks.size();
         ++block)
      segmentPlan.pages.push_back(block);
    context = isSpan ? hasher.join(context, parent) : parent;
    position += int64_t(tokens.size());
    plan.tokens.insert(plan.tokens.end(), tokens.begin(), tokens.end());
    plan.segments.push_back(std::move(segmentPlan));
  }
  plan.numPromptTokens = uint32_t(plan.tokens.size());
  plan.nextPosition = position;
  return plan;
}

void printRequestPlan(llvm::raw_ostream &os, const RequestPlan &plan) {
  for (uint32_t index = 0; index < plan.segments.size(); ++index) {
    const SegmentPlan &segment = plan.segments[index];
    os << "segment " << index << " " << segmentKindName(segment.kind)
       << ": tokens [" << segment.firstToken << ", "
       << segment.firstToken + segment.numTokens << ") positions ["
       << segment.firstPosition << ", "
       << segment.firstPosition + segment.numTokens << ") blocks ["
       << segment.firstBlock << ", " << segment.firstBlock + segment.numBlocks
       << ") parent " << segment.parentHash.str() << "\n";
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

AdmitResult KvCacheManager::admit(RequestId id,
                                  llvm::ArrayRef<Segment> segments) {
  if (requests_.count(id))
    return reject("request " + llvm::Twine(id) + " is already admitted");
  auto layout = layoutRequest(segments, cacheMode_, pool_.blockSize(), hasher_);
  if (!layout)
    return reject("request " + llvm::Twine(id) + ": " +
                  llvm::toString(layout.takeError()));
  auto request = std::make_unique<RequestState>();
  request->plan = std::move(*layout);
  RequestPlan &plan = request->plan;
  plan.id = id;
  request->numPromptBlocks = uint32_t(plan.blocks.size());
  const unsigned blockSize = pool_.blockSize();

  // Hits, and whether the misses fit.
  llvm::SmallVector<BlockId, 32> hits;
  llvm::DenseSet<BlockId> revived; // hits now on the free list
  uint32_t numMisses = 0;
  for (LogicalBlock &block : plan.blocks) {
    std::optional<BlockId> hit;
    // The last prompt block is always computed, even when cached: the
    // logits of the last prompt token must come from a forward pass, and
    // the first generated token is written into that block's free slots.
    if (cacheMode_ != CacheMode::Off && &block != &plan.blocks.back())
      hit = pool_.lookup(block.hash);
    if (!hit) {
      ++numMisses;
      continue;
    }
    block.block = *hit;
    block.reused = true;
    hits.push_back(*hit);
    if (pool_.refCount(*hit) == 0)
      revived.insert(*hit);
  }
  const uint32_t available = pool_.numFreeBlocks() - uint32_t(revived.size());
  if (numMisses > available) {
    llvm::DenseSet<BlockId> distinctHits(hits.begin(), hits.end());
    uint64_t needed = uint64_t(numMisses) + distinctHits.size();
    if (needed > pool_.numBlocks())
      return reject("request " + llvm::Twine(id) + " needs " +
                    llvm::Twine(needed) + " blocks (" +
                    llvm::Twine(plan.numPromptTokens) + " tokens in " +
                    llvm::Twine(plan.blocks.size()) + " blocks of " +
                    llvm::Twine(blockSize) + ") but the KV cache holds " +
                    llvm::Twine(pool_.numBlocks()));
    return {AdmitStatus::Wait,
            ("request " + llvm::Twine(id) + " needs " + llvm::Twine(numMisses) +
             " new blocks, " + llvm::Twine(available) + " can be freed now (" +
             llvm::Twine(pool_.numBlocks() - pool_.numFreeBlocks()) +
             " held by running requests)")
                .str()};
  }

  // Commit: from here nothing fails.
  pool_.touch(hits);
  auto fresh = pool_.allocate(numMisses);
  if (!fresh)
    llvm::report_fatal_error(llvm::Twine("KvCacheManager: allocation failed "
                                         "after check: ") +
                             llvm::toString(fresh.takeError()));
  size_t nextFresh = 0;
  for (uint32_t index = 0; index < plan.blocks.size(); ++index) {
    LogicalBlock &block = plan.blocks[index];
    if (block.reused) {
      plan.numReusedTokens += block.numTokens;
      if (relocationMode_ == RelocationMode::Rerope &&
          pool_.storedPosition(block.block) != block.position)
        request->relocations.push_back(
            {id, index, block.block, block.position});
      continue;
    }
    block.block = (*fresh)[nextFresh++];
    pool_.setNumTokens(block.block, block.numTokens);
    pool_.setStoredPosition(block.block, block.position);
    if (cacheMode_ != CacheMode::Off) {
      request->inFlight.push_back(block.hash);
      ++inFlight_[block.hash];
    }
  }

  // Compute runs: maximal stretches of misses inside one segment.
  for (uint32_t index = 0; index < plan.segments.size(); ++index) {
    const SegmentPlan &segment = plan.segments[index];
    const uint32_t ownStart =
        uint32_t(segment.pages.size()) - segment.numBlocks;
    int64_t logicalIndex = 0;
    for (uint32_t page = 0; page < ownStart; ++page)
      logicalIndex += plan.blocks[segment.pages[page]].numTokens;
    for (uint32_t own = 0; own < segment.numBlocks; ++own) {
      const LogicalBlock &block = plan.blocks[segment.firstBlock + own];
      if (!block.reused) {
        if (plan.runs.empty() || plan.runs.back().segment != index ||
            plan.runs.back().firstBlock + plan.runs.back().numBlocks !=
                segment.firstBlock + own) {
          ComputeRun run;
          run.segment = index;
          run.firstBlock = segment.firstBlock + own;
          run.firstToken = block.firstToken;
          run.firstPosition = block.position;
          run.firstLogicalIndex = logicalIndex;
          plan.runs.push_back(run);
        }
        ComputeRun &run = plan.runs.back();
        ++run.numBlocks;
        run.numTokens += block.numTokens;
        run.numPages = ownStart + own + 1;
      }
      logicalIndex += block.numTokens;
    }
  }

  requests_[id] = std::move(request);
  pending_.push_back(id);
  return {AdmitStatus::Admitted, ""};
}

llvm::Expected<StepPlan>
KvCacheManager::planStep(const RelocationPlannerOptions &options) {
  StepPlan step;
  while (true) {
    llvm::DenseSet<BlockId> readInPlace;
    llvm::SmallVector<RelocationRequest, 16> relocations;
    for (auto &entry : requests_) {
      RequestState &request = *entry.second;
      if (!request.pending) {
        for (const LogicalBlock &block : request.plan.blocks)
          readInPlace.insert(block.block);
        continue;
      }
      relocations.append(request.relocations.begin(),
                         request.relocations.end());
      for (const LogicalBlock &block : request.plan.blocks)
        if (block.reused && pool_.storedPosition(block.block) == block.position)
          readInPlace.insert(block.block);
    }
    auto plan = planRelocations(pool_, relocations, readInPlace, {}, options);
    if (plan) {
      for (const Rebinding &rebinding : plan->rebindings)
        state(rebinding.request).plan.blocks[rebinding.tag].block =
            rebinding.block;
      for (RequestId id : pending_) {
        RequestState &request = state(id);
        request.pending = false;
        request.relocations.clear();
      }
      pending_.clear();
      step.relocation = std::move(*plan);
      return step;
    }
    std::string message;
    std::error_code code;
    llvm::handleAllErrors(plan.takeError(),
                          [&](const llvm::ErrorInfoBase &info) {
                            message = info.message();
                            code = info.convertToErrorCode();
                          });
    if (code != std::errc::not_enough_memory || pending_.empty())
      return llvm::createStringError(code, "%s", message.c_str());
    // Too few blocks for the copies: the newest request waits.
    RequestId newest = pending_.back();
    step.deferred.push_back(newest);
    release(newest);
  }
}

void KvCacheManager::finishStep(const StepPlan &step) {
  pool_.free(step.relocation.temporaries);
}

void KvCacheManager::cacheBlocks(RequestState &request, uint32_t begin,
                                 uint32_t end) {
  if (cacheMode_ == CacheMode::Off)
    return;
  RequestPlan &plan = request.plan;
  for (uint32_t index = begin; index < end; ++index) {
    LogicalBlock &block = plan.blocks[index];
    if (block.reused)
      continue; // already cached (or a duplicate of a cached block)
    pool_.cacheBlock(block.block, block.hash);
  }
}

void KvCacheManager::commitPrefill(RequestId id) {
  RequestState &request = state(id);
  if (request.committed)
    return;
  request.committed = true;
  cacheBlocks(request, 0, request.numPromptBlocks);
  forgetInFlight(request);
}

void KvCacheManager::forgetInFlight(RequestState &request) {
  for (const BlockHash &hash : request.inFlight) {
    auto found = inFlight_.find(hash);
    if (--found->second == 0)
      inFlight_.erase(found);
  }
  request.inFlight.clear();
}

bool KvCacheManager::needsBlocksInFlight(
    llvm::ArrayRef<Segment> segments) const {
  if (inFlight_.empty() || cacheMode_ == CacheMode::Off)
    return false;
  auto layout = layoutRequest(segments, cacheMode_, pool_.blockSize(), hasher_);
  if (!layout) {
    llvm::consumeError(layout.takeError()); // admit() reports it
    return false;
  }
  // The last prompt block is computed anyway (see admit()).
  for (size_t index = 0; index + 1 < layout->blocks.size(); ++index) {
    const BlockHash &hash = layout->blocks[index].hash;
    if (inFlight_.count(hash) && !pool_.lookup(hash))
      return true;
  }
  return false;
}

namespace {

/// The hash of `plan.blocks[index]` with the tokens it holds now.
BlockHash currentHash(const BlockHasher &hasher, const RequestPlan &plan,
                      uint32_t index) {
  const LogicalBlock &block = plan.blocks[index];
  const SegmentPlan &segment = plan.segments[block.segment];
  const BlockHash &parent = index == segment.firstBlock
                                ? segment.parentHash
                                : plan.blocks[index - 1].hash;
  return hasher.hashBlock(parent,
                          llvm::ArrayRef<TokenId>(plan.tokens)
                              .slice(block.firstToken, block.numTokens));
}

} // namespace

llvm::Expected<DecodeSlot> KvCacheManager::appendToken(RequestId id,
                                                       TokenId token) {
  RequestState &request = state(id);
  RequestPlan &plan = request.plan;
  const unsigned blockSize = pool_.blockSize();
  const uint32_t lastIndex = uint32_t(plan.blocks.size()) - 1;
  LogicalBlock &last = plan.blocks[lastIndex];
  SegmentPlan &segment = plan.segments.back();
  DecodeSlot slot;
  slot.position = plan.nextPosition;

  if (last.numTokens < blockSize) {
    // The open block: write only into a private, uncached block.
    if (pool_.isCached(last.block) || pool_.refCount(last.block) > 1) {
      auto fresh = pool_.allocate(1);
      if (!fresh)
        return fresh.takeError();
      BlockId copy = (*fresh)[0];
      slot.copy = RelocationOp{last.block, copy, 0};
      pool_.setNumTokens(copy, last.numTokens);
      pool_.setStoredPosition(copy, pool_.storedPosition(last.block));
      pool_.free({last.block});
      last.block = copy;
      last.reused = false;
    }
    slot.block = last.block;
    slot.slot = last.numTokens;
    ++last.numTokens;
    pool_.setNumTokens(last.block, last.numTokens);
  } else {
    // The last block is full: its K/V were computed in an earlier step, so
    // it can enter the cache now; the token opens a new block.
    auto fresh = pool_.allocate(1);
    if (!fresh)
      return fresh.takeError();
    if (!last.reused) {
      last.hash = currentHash(hasher_, plan, lastIndex);
      if (request.committed && cacheMode_ != CacheMode::Off)
        pool_.cacheBlock(last.block, last.hash);
    }
    LogicalBlock block;
    block.block = (*fresh)[0];
    block.segment = uint32_t(plan.segments.size()) - 1;
    block.firstToken = uint32_t(plan.tokens.size());
    block.numTokens = 1;
    block.position = plan.nextPosition;
    pool_.setNumTokens(block.block, 1);
    pool_.setStoredPosition(block.block, block.position);
    segment.pages.push_back(uint32_t(plan.blocks.size()));
    ++segment.numBlocks;
    plan.blocks.push_back(block);
    slot.block = block.block;
    slot.slot = 0;
  }
  plan.tokens.push_back(token);
  ++segment.numTokens;
  ++plan.nextPosition;
  return slot;
}

void KvCacheManager::dropReferences(RequestState &request) {
  llvm::SmallVector<BlockId, 32> blocks;
  for (auto it = request.plan.blocks.rbegin(); it != request.plan.blocks.rend();
       ++it)
    blocks.push_back(it->block);
  pool_.free(blocks);
}

void KvCacheManager::release(RequestId id) {
  RequestState &request = state(id);
  RequestPlan &plan = request.plan;
  if (request.committed && cacheMode_ != CacheMode::Off) {
    // Blocks that grew past the prompt: hash them with all their tokens.
    for (uint32_t index = 0; index < plan.blocks.size(); ++index) {
      LogicalBlock &block = plan.blocks[index];
      if (block.reused || pool_.isCached(block.block))
        continue;
      if (index + 1 >= request.numPromptBlocks)
        block.hash = currentHash(hasher_, plan, index);
      pool_.cacheBlock(block.block, block.hash);
    }
  }
  forgetInFlight(request);
  dropReferences(request);
  if (request.pending)
    pending_.erase(llvm::find(pending_, id));
  requests_.erase(id);
}

} // namespace spanc::kv
