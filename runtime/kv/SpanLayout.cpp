//===- SpanLayout.cpp - The span-layout policy: modes, segments, hashes ---===//

#include "runtime/kv/SpanLayout.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace spanc::kv {

namespace {

llvm::Error invalidArgument(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s",
                                 message.str().c_str());
}

} // namespace

llvm::Expected<CacheMode> parseCacheMode(llvm::StringRef text) {
  if (text == "span")
    return CacheMode::Span;
  if (text == "prefix")
    return CacheMode::Prefix;
  if (text == "off")
    return CacheMode::Off;
  return invalidArgument("--cache '" + text +
                         "': expected span, prefix or off");
}

const char *cacheModeName(CacheMode mode) {
  switch (mode) {
  case CacheMode::Span:
    return "span";
  case CacheMode::Prefix:
    return "prefix";
  case CacheMode::Off:
    return "off";
  }
  return "?";
}

llvm::Expected<SpanContext> parseSpanContext(llvm::StringRef text) {
  if (text == "prefix")
    return SpanContext::Prefix;
  if (text == "isolated")
    return SpanContext::Isolated;
  return invalidArgument("--span-context '" + text +
                         "': expected prefix or isolated");
}

const char *spanContextName(SpanContext context) {
  return context == SpanContext::Prefix ? "prefix" : "isolated";
}

llvm::Expected<RelocationMode> parseRelocationMode(llvm::StringRef text) {
  if (text == "rerope")
    return RelocationMode::Rerope;
  if (text == "rope-in-kernel")
    return RelocationMode::RopeInKernel;
  return invalidArgument("--relocation '" + text +
                         "': expected rerope or rope-in-kernel");
}

const char *relocationModeName(RelocationMode mode) {
  return mode == RelocationMode::Rerope ? "rerope" : "rope-in-kernel";
}

llvm::Expected<RepairLayers> parseRepairLayers(llvm::StringRef text) {
  if (text == "all")
    return RepairLayers::All;
  if (text == "last")
    return RepairLayers::Last;
  if (text == "upper")
    return RepairLayers::Upper;
  return invalidArgument("--span-guided-layers '" + text +
                         "': expected all, last or upper");
}

const char *repairLayersName(RepairLayers layers) {
  switch (layers) {
  case RepairLayers::All:
    return "all";
  case RepairLayers::Last:
    return "last";
  case RepairLayers::Upper:
    return "upper";
  }
  return "?";
}

llvm::Expected<RepairGranularity> parseRepairGranularity(llvm::StringRef text) {
  if (text == "block")
    return RepairGranularity::Block;
  if (text == "token")
    return RepairGranularity::Token;
  return invalidArgument("--span-guided-granularity '" + text +
                         "': expected block or token");
}

const char *repairGranularityName(RepairGranularity granularity) {
  return granularity == RepairGranularity::Block ? "block" : "token";
}

llvm::Error checkSpanOptions(const SpanOptions &options) {
  for (auto [name, value] :
       {std::make_pair("--span-recompute", options.recomputeBlocks),
        std::make_pair("--span-recompute-end", options.recomputeEndBlocks)})
    if (value > kMaxRecomputeBlocks)
      return invalidArgument(llvm::Twine(name) + " " + llvm::Twine(value) +
                             ": must be in [0, " +
                             llvm::Twine(kMaxRecomputeBlocks) + "] blocks");
  for (auto [name, value] :
       {std::make_pair("--span-blend", options.blendPercent),
        std::make_pair("--span-guided", options.guidedPercent)})
    if (value > 100)
      return invalidArgument(llvm::Twine(name) + " " + llvm::Twine(value) +
                             ": a percentage, 0..100");
  if (options.blendPercent && options.guidedPercent)
    return invalidArgument("--span-blend and --span-guided: a plus is "
                           "repaired one way; give one of them");
  if (options.guidedNeighbours > kMaxRepairNeighbours)
    return invalidArgument(
        "--span-guided-neighbours " + llvm::Twine(options.guidedNeighbours) +
        ": must be in [0, " + llvm::Twine(kMaxRepairNeighbours) + "]");
  for (auto [name, value] :
       {std::make_pair("--span-temperature", options.temperature),
        std::make_pair("--span-mass-scale", options.massScale)})
    // Also refuses NaN.
    if (!(value >= 0.1f && value <= 4.0f))
      return llvm::createStringError(std::errc::invalid_argument,
                                     "%s %g: must be in [0.1, 4]", name,
                                     double(value));
  return llvm::Error::success();
}

llvm::Expected<SpanOptions> parseSpanMode(llvm::StringRef text) {
  auto bad = [&] {
    return invalidArgument(
        "span mode '" + text +
        "': expected isolated or prefix, optionally +recomputeN and +endN "
        "with N in 1..64, +blendP or +guidedP with P in 1..100 (guided: "
        "+last or +upper, +tokens, +nearN with N in 1..8), +tempP and "
        "+massP (span scaling in percent, 10..400)");
  };
  llvm::SmallVector<llvm::StringRef, 4> parts;
  text.split(parts, '+');
  // A name spells every recompute: "prefix" alone recomputes nothing.
  SpanOptions options;
  options.recomputeEndBlocks = 0;
  auto parsed = parseSpanContext(parts[0]);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return bad();
  }
  options.context = *parsed;
  bool guidedDetail = false;
  for (llvm::StringRef part : llvm::makeArrayRef(parts).drop_front()) {
    unsigned value = 0;
    auto number = [&](llvm::StringRef prefix, unsigned low, unsigned high) {
      llvm::StringRef rest = part;
      return rest.consume_front(prefix) && !rest.getAsInteger(10, value) &&
             value >= low && value <= high;
    };
    if (part == "last" || part == "upper") {
      options.guidedLayers =
          part == "last" ? RepairLayers::Last : RepairLayers::Upper;
      guidedDetail = true;
    } else if (part == "tokens") {
      options.guidedGranularity = RepairGranularity::Token;
      guidedDetail = true;
    } else if (number("near", 1, kMaxRepairNeighbours)) {
      options.guidedNeighbours = value;
      guidedDetail = true;
    } else if (number("recompute", 1, kMaxRecomputeBlocks)) {
      options.recomputeBlocks = value;
    } else if (number("end", 1, kMaxRecomputeBlocks)) {
      options.recomputeEndBlocks = value;
    } else if (number("blend", 1, 100)) {
      options.blendPercent = value;
    } else if (number("guided", 1, 100)) {
      options.guidedPercent = value;
    } else if (number("temp", 10, 400)) {
      options.temperature = float(value) / 100.0f;
    } else if (number("mass", 10, 400)) {
      options.massScale = float(value) / 100.0f;
    } else {
      return bad();
    }
  }
  if ((guidedDetail && !options.guidedPercent) ||
      (options.blendPercent && options.guidedPercent))
    return bad();
  return options;
}

std::string spanModeName(const SpanOptions &options) {
  std::string name = spanContextName(options.context);
  if (options.recomputeBlocks > 0)
    name += "+recompute" + std::to_string(options.recomputeBlocks);
  if (options.recomputeEndBlocks > 0)
    name += "+end" + std::to_string(options.recomputeEndBlocks);
  if (options.blendPercent > 0)
    name += "+blend" + std::to_string(options.blendPercent);
  if (options.guidedPercent > 0) {
    name += "+guided" + std::to_string(options.guidedPercent);
    if (options.guidedLayers != RepairLayers::All)
      name += std::string("+") + repairLayersName(options.guidedLayers);
    if (options.guidedGranularity == RepairGranularity::Token)
      name += "+tokens";
    if (options.guidedNeighbours > 0)
      name += "+near" + std::to_string(options.guidedNeighbours);
  }
  if (options.temperature != 1)
    name +=
        "+temp" + std::to_string(int(std::lround(options.temperature * 100)));
  if (options.massScale != 1)
    name += "+mass" + std::to_string(int(std::lround(options.massScale * 100)));
  return name;
}

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
  // Repair (SpanOptions::blendPercent, guidedPercent): the span blocks of
  // the plus being laid out, and whether any span of it missed some of the
  // context.
  const bool repairing = cacheMode == CacheMode::Span && spanOptions.repairs();
  struct RepairSource {
    uint32_t block;
    bool forced;    ///< a head or end block: recomputed whole
    bool candidate; ///< its span missed some of the context
  };
  llvm::SmallVector<RepairSource, 32> blendBlocks;
  bool blendNeeded = false;
  // Ends the plus before `next`: a repair segment over its spans, or
  // (nothing to repair) the span blocks read as they are.
  auto finishPlus = [&](const Segment &next) {
    if (blendBlocks.empty())
      return;
    if (!blendNeeded) {
      for (const RepairSource &source : blendBlocks)
        visible.push_back(source.block);
      blendBlocks.clear();
      return;
    }
    SegmentPlan blend;
    blend.kind = SegmentKind::Tail;
    blend.boundary = true;
    blend.blend = true;
    blend.guided = spanOptions.guidedPercent != 0;
    const LogicalBlock &first = plan.blocks[blendBlocks.front().block];
    blend.firstToken = first.firstToken;
    blend.firstPosition = first.position;
    blend.contextSegments = plusSegments;
    blend.contextTokens = uint32_t(plusTokens);
    // Every repair block depends on every span (the choice of tokens is
    // global), so the chain starts from the context after all of them and
    // the repair's settings; a question-guided repair's choice depends on
    // the question too.
    if (blend.guided) {
      const TokenId settings[] = {TokenId(-3),
                                  TokenId(spanOptions.guidedPercent),
                                  TokenId(spanOptions.guidedLayers),
                                  TokenId(spanOptions.guidedGranularity),
                                  TokenId(spanOptions.guidedNeighbours),
                                  TokenId(spanOptions.recomputeBlocks),
                                  TokenId(spanOptions.recomputeEndBlocks)};
      blend.parentHash = hasher.join(
          hasher.join(context, hasher.hashBlock(hasher.root(), settings)),
          hasher.hashBlock(hasher.root(),
                           llvm::ArrayRef<TokenId>(next.tokens)
                               .drop_back(std::min<size_t>(
                                   next.generatedTokens, next.tokens.size()))));
      blend.probeTokens = uint32_t(next.tokens.size()) -
                          std::min<uint32_t>(next.generatedTokens,
                                             uint32_t(next.tokens.size()));
    } else {
      const TokenId settings[] = {TokenId(-1),
                                  TokenId(spanOptions.blendPercent),
                                  TokenId(spanOptions.recomputeBlocks),
                                  TokenId(spanOptions.recomputeEndBlocks)};
      blend.parentHash =
          hasher.join(context, hasher.hashBlock(hasher.root(), settings));
    }
    const uint32_t blendIndex = uint32_t(plan.segments.size());
    blend.firstBlock = uint32_t(plan.blocks.size());
    BlockHash parent = blend.parentHash;
    for (const auto [source, forced, candidate] : blendBlocks) {
      LogicalBlock block = plan.blocks[source];
      block.segment = blendIndex;
      block.computePosition = block.position;
      block.hash = hasher.hashBlock(
          parent, llvm::ArrayRef<TokenId>(plan.tokens)
                      .slice(block.firstToken, block.numTokens));
      block.blendSource = source;
      block.blendForced = forced;
      block.repairCandidate = candidate;
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
      finishPlus(segment);
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
    if (repairing) {
      // The spans' blocks wait for the repair at the end of the plus.
      for (uint32_t block = 0; block < spanBlocks; ++block)
        blendBlocks.push_back(
            {spanFirstBlock + block, recompute[block], !sawEverythingBefore});
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

void settleSpanHits(RequestPlan &plan, RelocationMode relocationMode) {
  auto computeWhole = [&](const SegmentPlan &segment) {
    for (LogicalBlock &block :
         llvm::MutableArrayRef<LogicalBlock>(plan.blocks)
             .slice(segment.firstBlock, segment.numBlocks)) {
      block.reused = false;
      block.block = InvalidBlock;
    }
  };
  auto foundWhole = [&](const SegmentPlan &segment) {
    return llvm::all_of(llvm::ArrayRef<LogicalBlock>(plan.blocks)
                            .slice(segment.firstBlock, segment.numBlocks),
                        [](const LogicalBlock &b) { return b.reused; });
  };
  // With ReRoPE a span that reads its prefix is computed at its compute
  // positions; a block of it found in the cache sits at a request position,
  // so a span that is not found whole is computed whole.
  if (relocationMode == RelocationMode::Rerope)
    for (const SegmentPlan &segment : plan.segments)
      if (segment.kind == SegmentKind::Span && segment.contextSegments != 0 &&
          !foundWhole(segment))
        computeWhole(segment);
  // A repair's tokens are chosen over all its blocks: it is reused whole or
  // computed whole. A question-guided one writes its probe's K/V into the
  // blocks of the segments after it: they must be its own.
  bool probed = false;
  for (const SegmentPlan &segment : plan.segments) {
    if (probed) {
      computeWhole(segment);
      continue;
    }
    if (!segment.blend || foundWhole(segment))
      continue;
    computeWhole(segment);
    probed = segment.guided;
  }
}

uint32_t countReusedTokens(const RequestPlan &plan, bool spansOnly) {
  uint32_t reused = 0;
  for (uint32_t page : plan.segments.back().pages) {
    const LogicalBlock &block = plan.blocks[page];
    const LogicalBlock &source = block.blendSource != UINT32_MAX
                                     ? plan.blocks[block.blendSource]
                                     : block;
    if (!block.reused && !source.reused)
      continue;
    if (spansOnly && (!source.reused ||
                      plan.segments[source.segment].kind != SegmentKind::Span))
      continue;
    reused += block.numTokens;
  }
  return reused;
}

int64_t repairStepTokens(const SpanOptions &options, int64_t spanTokens,
                         int64_t probeTokens) {
  if (options.guidedPercent)
    return spanTokens * options.guidedPercent / 100 + probeTokens + 1;
  return spanTokens * (options.blendPercent + 10) / 100 + 1;
}

} // namespace spanc::kv
