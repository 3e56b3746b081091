//===- KvCacheManager.cpp - Per-request block tables over the block pool --===//

#include "runtime/kv/KvCacheManager.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <cstring>

namespace spanc::kv {

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

llvm::Expected<SpanContext> parseSpanContext(llvm::StringRef text) {
  if (text == "prefix")
    return SpanContext::Prefix;
  if (text == "isolated")
    return SpanContext::Isolated;
  return llvm::createStringError(
      std::errc::invalid_argument,
      "--span-context '%s': expected prefix or isolated", text.str().c_str());
}

const char *spanContextName(SpanContext context) {
  return context == SpanContext::Prefix ? "prefix" : "isolated";
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

llvm::Expected<RequestPlan> layoutRequest(llvm::ArrayRef<Segment> segments,
                                          CacheMode cacheMode,
                                          const SpanOptions &spanOptions,
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

  // Appends the blocks of `segment` (its tokens start at plan.tokens
  // [firstToken]) chained from `parent`; returns the last block's hash.
  auto addBlocks = [&](SegmentPlan &segment, uint32_t segmentIndex,
                       int64_t computePosition, BlockHash parent) {
    segment.firstBlock = uint32_t(plan.blocks.size());
    for (uint32_t start = 0; start < segment.numTokens; start += blockSize) {
      uint32_t count = std::min<uint32_t>(blockSize, segment.numTokens - start);
      LogicalBlock block;
      block.segment = segmentIndex;
      block.firstToken = segment.firstToken + start;
      block.numTokens = count;
      block.position = segment.firstPosition + start;
      block.computePosition = computePosition + start;
      block.hash = hasher.hashBlock(
          parent, llvm::ArrayRef<TokenId>(plan.tokens)
                      .slice(block.firstToken, block.numTokens));
      parent = block.hash;
      plan.blocks.push_back(block);
    }
    segment.numBlocks = uint32_t(plan.blocks.size()) - segment.firstBlock;
    return parent;
  };
  auto appendOwnPages = [&](SegmentPlan &segment) {
    for (uint32_t block = 0; block < segment.numBlocks; ++block)
      segment.pages.push_back(segment.firstBlock + block);
  };

  BlockHash context = hasher.root();
  int64_t position = 0;
  // The blocks a causal segment starting here reads, in order.
  llvm::SmallVector<uint32_t, 32> visible;
  // The context of the plus being laid out (its spans are consecutive).
  bool inPlus = false;
  BlockHash plusContext;
  llvm::SmallVector<uint32_t, 32> plusPages;
  uint32_t plusSegments = 0;
  int64_t plusTokens = 0;
  // Blend (SpanOptions::blendPercent): the span blocks of the plus being
  // laid out, with their forced flags, and whether any span of it missed
  // some of the context.
  const bool blending =
      cacheMode == CacheMode::Span && spanOptions.blendPercent;
  llvm::SmallVector<std::pair<uint32_t, bool>, 32> blendBlocks;
  bool blendNeeded = false;
  // Ends the plus: a blend segment over its spans, or (nothing to blend)
  // the span blocks read as they are.
  auto finishPlus = [&] {
    if (blendBlocks.empty())
      return;
    if (!blendNeeded) {
      for (auto [block, forced] : blendBlocks)
        visible.push_back(block);
      blendBlocks.clear();
      return;
    }
    SegmentPlan blend;
    blend.kind = SegmentKind::Tail;
    blend.boundary = true;
    blend.blend = true;
    const LogicalBlock &first = plan.blocks[blendBlocks.front().first];
    blend.firstToken = first.firstToken;
    blend.firstPosition = first.position;
    blend.contextSegments = plusSegments;
    blend.contextTokens = uint32_t(plusTokens);
    // Every blend block depends on every span (the choice of tokens is
    // global), so the chain starts from the context after all of them and
    // the blend's settings.
    const TokenId settings[] = {TokenId(-1), TokenId(spanOptions.blendPercent),
                                TokenId(spanOptions.recomputeBlocks),
                                TokenId(spanOptions.recomputeEndBlocks)};
    blend.parentHash =
        hasher.join(context, hasher.hashBlock(hasher.root(), settings));
    const uint32_t blendIndex = uint32_t(plan.segments.size());
    blend.firstBlock = uint32_t(plan.blocks.size());
    BlockHash parent = blend.parentHash;
    for (auto [source, forced] : blendBlocks) {
      LogicalBlock block = plan.blocks[source];
      block.segment = blendIndex;
      block.computePosition = block.position;
      block.hash = hasher.hashBlock(
          parent, llvm::ArrayRef<TokenId>(plan.tokens)
                      .slice(block.firstToken, block.numTokens));
      block.blendSource = source;
      block.blendForced = forced;
      parent = block.hash;
      blend.numTokens += block.numTokens;
      plan.blocks.push_back(block);
    }
    blend.numBlocks = uint32_t(plan.blocks.size()) - blend.firstBlock;
    blend.pages.assign(plusPages.begin(), plusPages.end());
    appendOwnPages(blend);
    for (uint32_t block = 0; block < blend.numBlocks; ++block)
      visible.push_back(blend.firstBlock + block);
    context = parent;
    plan.segments.push_back(std::move(blend));
    blendBlocks.clear();
    blendNeeded = false;
  };
  for (const Segment &segment : segments) {
    if (segment.kind != SegmentKind::Span)
      finishPlus();
    SegmentPlan segmentPlan;
    segmentPlan.kind = segment.kind;
    segmentPlan.firstToken = uint32_t(plan.tokens.size());
    segmentPlan.numTokens = uint32_t(segment.tokens.size());
    segmentPlan.firstPosition = position;
    plan.tokens.insert(plan.tokens.end(), segment.tokens.begin(),
                       segment.tokens.end());
    const uint32_t segmentIndex = uint32_t(plan.segments.size());

    if (segment.kind != SegmentKind::Span) {
      if (inPlus && cacheMode == CacheMode::Span && spanOptions.scalesSpans()) {
        // It reads the plus's spans scaled: its blocks differ from those
        // computed unscaled or at other settings.
        TokenId settings[3] = {TokenId(-2), 0, 0};
        std::memcpy(&settings[1], &spanOptions.temperature, sizeof(float));
        std::memcpy(&settings[2], &spanOptions.massScale, sizeof(float));
        context =
            hasher.join(context, hasher.hashBlock(hasher.root(), settings));
      }
      inPlus = false;
      segmentPlan.parentHash = context;
      segmentPlan.contextSegments = segmentIndex;
      segmentPlan.contextTokens = uint32_t(position);
      context = addBlocks(segmentPlan, segmentIndex, position, context);
      segmentPlan.pages.assign(visible.begin(), visible.end());
      appendOwnPages(segmentPlan);
      for (uint32_t block = 0; block < segmentPlan.numBlocks; ++block)
        visible.push_back(segmentPlan.firstBlock + block);
      position += segmentPlan.numTokens;
      plan.segments.push_back(std::move(segmentPlan));
      continue;
    }

    if (!inPlus) {
      inPlus = true;
      plusContext = context;
      plusPages.assign(visible.begin(), visible.end());
      plusSegments = segmentIndex;
      plusTokens = position;
    }
    const bool isolated =
        spanOptions.context == SpanContext::Isolated || segment.ownContext;
    segmentPlan.parentHash = isolated ? hasher.root() : plusContext;
    segmentPlan.contextSegments = isolated ? 0 : plusSegments;
    segmentPlan.contextTokens = isolated ? 0 : uint32_t(plusTokens);
    // A span that reads its prefix is computed right after it, so its K/V
    // are the same wherever it sits among its siblings. An isolated one
    // reads nothing before it: any position gives the same K/V up to the
    // rotation, and its request position saves a move.
    const int64_t computePosition = isolated ? position : plusTokens;
    const BlockHash spanFinal = addBlocks(
        segmentPlan, segmentIndex, computePosition, segmentPlan.parentHash);
    if (!isolated)
      segmentPlan.pages.assign(plusPages.begin(), plusPages.end());
    appendOwnPages(segmentPlan);
    const uint32_t spanFirstBlock = segmentPlan.firstBlock;
    const uint32_t spanBlocks = segmentPlan.numBlocks;
    const uint32_t spanTokens = segmentPlan.numTokens;
    plan.segments.push_back(std::move(segmentPlan));

    // Recompute its head and end blocks in this call's context unless it
    // saw all of that context.
    const bool sawEverythingBefore = !isolated && plusSegments == segmentIndex;
    llvm::SmallVector<bool, 16> recompute(spanBlocks, false);
    if (!sawEverythingBefore) {
      for (uint32_t b = 0;
           b < std::min(spanOptions.recomputeBlocks, spanBlocks); ++b)
        recompute[b] = true;
      for (uint32_t b = 0;
           b < std::min(spanOptions.recomputeEndBlocks, spanBlocks); ++b)
        recompute[spanBlocks - 1 - b] = true;
    }
    if (blending) {
      // The spans' blocks wait for the blend at the end of the plus.
      for (uint32_t block = 0; block < spanBlocks; ++block)
        blendBlocks.push_back({spanFirstBlock + block, recompute[block]});
      blendNeeded |= !sawEverythingBefore;
      context = hasher.join(context, spanFinal);
      position += spanTokens;
      continue;
    }
    if (llvm::none_of(recompute, [](bool r) { return r; })) {
      for (uint32_t block = 0; block < spanBlocks; ++block)
        visible.push_back(spanFirstBlock + block);
      context = hasher.join(context, spanFinal);
      position += spanTokens;
      continue;
    }
    // Walk the span's blocks: a kept block is read as cached; a run of
    // recomputed ones becomes a causal segment over everything visible
    // before it. `chain` names what a block here would have attended to.
    BlockHash chain = context;
    for (uint32_t begin = 0; begin < spanBlocks;) {
      if (!recompute[begin]) {
        visible.push_back(spanFirstBlock + begin);
        chain = hasher.join(chain, plan.blocks[spanFirstBlock + begin].hash);
        ++begin;
        continue;
      }
      uint32_t end = begin;
      SegmentPlan run;
      run.kind = SegmentKind::Tail;
      run.boundary = true;
      run.firstToken = plan.blocks[spanFirstBlock + begin].firstToken;
      run.firstPosition = plan.blocks[spanFirstBlock + begin].position;
      while (end < spanBlocks && recompute[end])
        run.numTokens += plan.blocks[spanFirstBlock + end++].numTokens;
      run.parentHash = chain;
      run.contextSegments = begin == 0 ? segmentIndex : segmentIndex + 1;
      run.contextTokens = uint32_t(run.firstPosition);
      const uint32_t runIndex = uint32_t(plan.segments.size());
      chain = addBlocks(run, runIndex, run.firstPosition, chain);
      run.pages.assign(visible.begin(), visible.end());
      appendOwnPages(run);
      for (uint32_t block = 0; block < run.numBlocks; ++block)
        visible.push_back(run.firstBlock + block);
      plan.segments.push_back(std::move(run));
      begin = end;
    }
    // What follows depends on every block it reads: `chain` covers them
    // and differs from the join without a recompute.
    context = chain;
    position += spanTokens;
  }
  plan.numPromptTokens = uint32_t(plan.tokens.size());
  plan.nextPosition = position;
  return plan;
}

bool readsScaled(const RequestPlan &plan, const SegmentPlan &reader,
                 uint32_t page, const SpanOptions &spanOptions) {
  if (!spanOptions.scalesSpans() || reader.kind == SegmentKind::Span ||
      reader.boundary)
    return false;
  const SegmentPlan &owner = plan.segments[plan.blocks[page].segment];
  return owner.kind == SegmentKind::Span || owner.boundary;
}

AdmitResult KvCacheManager::admit(RequestId id,
                                  llvm::ArrayRef<Segment> segments) {
  if (requests_.count(id))
    return reject("request " + llvm::Twine(id) + " is already admitted");
  auto layout = layoutRequest(segments, cacheMode_, spanOptions_,
                              pool_.blockSize(), hasher_);
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
  // With ReRoPE a span that reads its prefix is computed at its compute
  // positions; a block of it found in the cache sits at a request position,
  // so a span that is not found whole is computed whole.
  if (relocationMode_ == RelocationMode::Rerope) {
    for (const SegmentPlan &segment : plan.segments) {
      if (segment.kind != SegmentKind::Span || segment.contextSegments == 0)
        continue;
      auto blocks = llvm::MutableArrayRef<LogicalBlock>(plan.blocks)
                        .slice(segment.firstBlock, segment.numBlocks);
      if (llvm::all_of(blocks, [](const LogicalBlock &b) { return b.reused; }))
        continue;
      for (LogicalBlock &block : blocks) {
        block.reused = false;
        block.block = InvalidBlock;
      }
    }
  }
  // A blend's tokens are chosen over all its blocks: it is reused whole
  // or computed whole.
  for (const SegmentPlan &segment : plan.segments) {
    if (!segment.blend)
      continue;
    auto blocks = llvm::MutableArrayRef<LogicalBlock>(plan.blocks)
                      .slice(segment.firstBlock, segment.numBlocks);
    if (llvm::all_of(blocks, [](const LogicalBlock &b) { return b.reused; }))
      continue;
    for (LogicalBlock &block : blocks) {
      block.reused = false;
      block.block = InvalidBlock;
    }
  }
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

  // Reused: the prompt tokens whose K/V the last segment reads from the
  // cache (a span head it reads recomputed does not count).
  // A blend block computed from a reused span block counts as reused: a
  // blend recomputes only a fraction of its tokens.
  for (uint32_t page : plan.segments.back().pages) {
    const LogicalBlock &block = plan.blocks[page];
    if (block.reused || (block.blendSource != UINT32_MAX &&
                         plan.blocks[block.blendSource].reused))
      plan.numReusedTokens += block.numTokens;
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

uint64_t KvCacheManager::layoutBlocks(llvm::ArrayRef<Segment> segments) const {
  auto layout = layoutRequest(segments, cacheMode_, spanOptions_,
                              pool_.blockSize(), hasher_);
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
  auto layout = layoutRequest(segments, cacheMode_, spanOptions_,
                              pool_.blockSize(), hasher_);
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
