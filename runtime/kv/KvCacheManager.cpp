//===- KvCacheManager.cpp - Per-request block tables over the block pool --===//

#include "runtime/kv/KvCacheManager.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace spanc::kv {

struct KvCacheManager::RequestState {
  RequestPlan plan;
  /// Relocations waiting for the next planStep.
  llvm::SmallVector<RelocationRequest, 8> relocations;
  uint32_t numPromptBlocks = 0;
  bool pending = true;    ///< admitted, planStep not yet run
  bool committed = false; ///< prefill K/V computed
  /// Hashes of the prompt blocks it computes, in inFlight_ until committed.
  llvm::SmallVector<BlockHash, 16> inFlight;
  /// Spans computed at their compute positions, to move to their request
  /// positions once computed (relocateComputedSpans).
  llvm::SmallVector<RelocationRequest, 8> computedSpanMoves;
};

KvCacheManager::KvCacheManager(BlockPool &pool, BlockHasher hasher,
                               CacheMode cacheMode,
                               RelocationMode relocationMode,
                               const SpanOptions &spanOptions)
    : pool_(pool), hasher_(std::move(hasher)), cacheMode_(cacheMode),
      relocationMode_(relocationMode), spanOptions_(spanOptions) {}

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

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// The compute runs of `plan`: maximal stretches of misses inside one
/// segment.
void addComputeRuns(RequestPlan &plan) {
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
}

/// Sets ComputeRun::extendsPrevious on the runs of `plan`.
void markExtendingRuns(RequestPlan &plan, bool scalesSpans) {
  if (scalesSpans)
    return;
  for (size_t index = 1; index < plan.runs.size(); ++index) {
    const ComputeRun &previous = plan.runs[index - 1];
    ComputeRun &run = plan.runs[index];
    const SegmentPlan &before = plan.segments[previous.segment];
    const SegmentPlan &segment = plan.segments[run.segment];
    run.extendsPrevious = !run.afterSpanRelocation && !before.blend &&
                          !segment.blend &&
                          previous.numPages <= run.numPages - run.numBlocks &&
                          std::equal(before.pages.begin(),
                                     before.pages.begin() + previous.numPages,
                                     segment.pages.begin());
  }
}

} // namespace

llvm::Expected<RequestPlan>
KvCacheManager::layOut(llvm::ArrayRef<Segment> segments) const {
  const auto start = std::chrono::steady_clock::now();
  auto layout = layoutRequest(segments, cacheMode_, spanOptions_,
                              pool_.blockSize(), hasher_);
  profile_.layoutSeconds += secondsSince(start);
  ++profile_.layouts;
  return layout;
}

AdmitResult KvCacheManager::admit(RequestId id,
                                  llvm::ArrayRef<Segment> segments) {
  if (requests_.count(id))
    return reject("request " + llvm::Twine(id) + " is already admitted");
  auto layout = layOut(segments);
  const auto start = std::chrono::steady_clock::now();
  ++profile_.admissions;
  auto timeAdmission = llvm::make_scope_exit(
      [&] { profile_.admitSeconds += secondsSince(start); });
  if (!layout)
    return reject("request " + llvm::Twine(id) + ": " +
                  llvm::toString(layout.takeError()));
  auto request = std::make_unique<RequestState>();
  request->plan = std::move(*layout);
  RequestPlan &plan = request->plan;
  plan.id = id;
  request->numPromptBlocks = uint32_t(plan.blocks.size());
  const unsigned blockSize = pool_.blockSize();

  // Hits.
  for (LogicalBlock &block : plan.blocks) {
    // The last prompt block is always computed, even when cached: the
    // logits of the last prompt token must come from a forward pass, and
    // the first generated token is written into that block's free slots.
    if (cacheMode_ == CacheMode::Off || &block == &plan.blocks.back())
      continue;
    if (std::optional<BlockId> hit = pool_.lookup(block.hash)) {
      block.block = *hit;
      block.reused = true;
    }
  }
  settleSpanHits(plan, relocationMode_);
  // Whether the misses fit.
  llvm::SmallVector<BlockId, 32> hits;
  llvm::DenseSet<BlockId> revived; // hits now on the free list
  uint32_t numMisses = 0;
  for (const LogicalBlock &block : plan.blocks) {
    if (!block.reused) {
      ++numMisses;
      continue;
    }
    hits.push_back(block.block);
    if (pool_.refCount(block.block) == 0)
      revived.insert(block.block);
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
      if (relocationMode_ == RelocationMode::Rerope &&
          pool_.storedPosition(block.block) != block.position)
        request->relocations.push_back(
            {id, index, block.block, block.position});
      continue;
    }
    block.block = (*fresh)[nextFresh++];
    pool_.setNumTokens(block.block, block.numTokens);
    pool_.setStoredPosition(block.block, block.computePosition);
    if (relocationMode_ == RelocationMode::Rerope &&
        block.computePosition != block.position)
      request->computedSpanMoves.push_back(
          {id, index, block.block, block.position});
    if (cacheMode_ != CacheMode::Off) {
      request->inFlight.push_back(block.hash);
      ++inFlight_[block.hash];
    }
  }

  plan.numReusedTokens = countReusedTokens(plan);

  addComputeRuns(plan);

  // Spans computed away from their request position move there before a
  // causal run after them reads them: each causal run preceded by spans
  // not yet moved is a barrier (a recompute run can read its own span's
  // kept blocks, so there may be one per span).
  if (!request->computedSpanMoves.empty()) {
    uint32_t movedBelow = 0; // moves of earlier segments have a barrier
    for (ComputeRun &run : plan.runs) {
      if (plan.segments[run.segment].kind == SegmentKind::Span)
        continue;
      bool unmoved = llvm::any_of(
          request->computedSpanMoves, [&](const RelocationRequest &move) {
            uint32_t segment = plan.blocks[move.tag].segment;
            return segment >= movedBelow && segment < run.segment;
          });
      if (unmoved) {
        run.afterSpanRelocation = true;
        movedBelow = run.segment;
      }
    }
  }

  markExtendingRuns(plan, spanOptions_.scalesSpans());
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

bool KvCacheManager::relocateComputedSpans(RequestId id,
                                           uint32_t beforeSegment) {
  RequestState &request = state(id);
  auto computed = [&](const RelocationRequest &move) {
    return request.plan.blocks[move.tag].segment < beforeSegment;
  };
  size_t before = request.relocations.size();
  for (const RelocationRequest &move : request.computedSpanMoves)
    if (computed(move))
      request.relocations.push_back(move);
  llvm::erase_if(request.computedSpanMoves, computed);
  if (request.relocations.size() == before)
    return false;
  if (!request.pending) {
    request.pending = true;
    pending_.push_back(id);
  }
  return true;
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
    cacheBlock(plan, index);
  }
}

void KvCacheManager::cacheBlock(const RequestPlan &plan, uint32_t index) {
  const LogicalBlock &block = plan.blocks[index];
  if (pool_.isCached(block.block) || !pool_.cacheBlock(block.block, block.hash))
    return; // cached already, or another block holds the hash
  KvEventSink *sink = pool_.eventSink();
  if (!sink)
    return;
  // The parent is the one the hash chained from (currentHash below), so
  // an observer can check the chain and tell a span's from a prefix's.
  const SegmentPlan &segment = plan.segments[block.segment];
  StoredBlock stored;
  stored.hash = block.hash;
  stored.parent = index == segment.firstBlock ? segment.parentHash
                                              : plan.blocks[index - 1].hash;
  stored.parentIsRoot = stored.parent == hasher_.root();
  stored.kind = segment.kind;
  stored.tokens = llvm::ArrayRef<TokenId>(plan.tokens)
                      .slice(block.firstToken, block.numTokens);
  sink->blockStored(stored);
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

uint64_t KvCacheManager::layoutBlocks(llvm::ArrayRef<Segment> segments) const {
  auto layout = layOut(segments);
  if (!layout) {
    llvm::consumeError(layout.takeError());
    return 0;
  }
  return layout->blocks.size();
}

bool KvCacheManager::needsBlocksInFlight(
    llvm::ArrayRef<Segment> segments) const {
  if (inFlight_.empty() || cacheMode_ == CacheMode::Off)
    return false;
  auto layout = layOut(segments);
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
        cacheBlock(plan, lastIndex);
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
      cacheBlock(plan, index);
    }
  }
  forgetInFlight(request);
  dropReferences(request);
  if (request.pending)
    pending_.erase(llvm::find(pending_, id));
  requests_.erase(id);
}

} // namespace spanc::kv
