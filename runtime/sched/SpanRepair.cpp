//===- SpanRepair.cpp - Multi-pass repair of a plus's stitched spans ------===//

#include "runtime/sched/SpanRepair.h"

#include <algorithm>
#include <chrono>

namespace spanc::sched {

std::pair<uint32_t, uint32_t> repairLayerBand(kv::RepairLayers layers,
                                              uint32_t numLayers) {
  switch (layers) {
  case kv::RepairLayers::All:
    return {0, numLayers};
  case kv::RepairLayers::Last:
    return {numLayers > 0 ? numLayers - 1 : 0, numLayers};
  case kv::RepairLayers::Upper: {
    uint32_t first = numLayers / 2;
    return {first, std::max(first + 1, numLayers * 3 / 4)};
  }
  }
  return {0, numLayers};
}

std::vector<uint8_t> selectBlendTokens(llvm::ArrayRef<float> distances,
                                       llvm::ArrayRef<uint8_t> forced,
                                       uint32_t percent) {
  std::vector<uint8_t> chosen(distances.size(), 0);
  std::vector<uint32_t> order;
  for (uint32_t token = 0; token < distances.size(); ++token) {
    if (forced[token])
      chosen[token] = 1;
    else
      order.push_back(token);
  }
  const size_t numChosen =
      std::min(order.size(), (distances.size() * percent + 99) / 100);
  std::partial_sort(order.begin(), order.begin() + numChosen, order.end(),
                    [&](uint32_t a, uint32_t b) {
                      return distances[a] > distances[b] ||
                             (distances[a] == distances[b] && a < b);
                    });
  for (size_t index = 0; index < numChosen; ++index)
    chosen[order[index]] = 1;
  return chosen;
}

std::vector<uint8_t> selectGuidedUnits(llvm::ArrayRef<RepairUnit> units,
                                       uint32_t percent, uint32_t neighbours) {
  std::vector<uint8_t> chosen(units.size(), 0);
  std::vector<uint32_t> order;
  for (uint32_t unit = 0; unit < units.size(); ++unit) {
    if (units[unit].forced)
      chosen[unit] = 1;
    else if (units[unit].candidate)
      order.push_back(unit);
  }
  const size_t numChosen =
      std::min(order.size(), (units.size() * percent + 99) / 100);
  std::partial_sort(order.begin(), order.begin() + numChosen, order.end(),
                    [&](uint32_t a, uint32_t b) {
                      return units[a].mass > units[b].mass ||
                             (units[a].mass == units[b].mass && a < b);
                    });
  for (size_t index = 0; index < numChosen; ++index) {
    const uint32_t unit = order[index];
    chosen[unit] = 1;
    for (uint32_t step = 1; step <= neighbours; ++step)
      for (int64_t near : {int64_t(unit) - step, int64_t(unit) + step})
        if (near >= 0 && near < int64_t(units.size()) &&
            units[size_t(near)].span == units[unit].span &&
            units[size_t(near)].candidate)
          chosen[size_t(near)] = 1;
  }
  return chosen;
}

llvm::Error SpanRepair::measureDistances(const SchedulerOutput &step,
                                         const BlendTask &task) {
  auto sources = llvm::ArrayRef<int32_t>(step.sourceBlocks)
                     .slice(task.firstBlock, task.numBlocks);
  auto blends = llvm::ArrayRef<int32_t>(step.blendBlocks)
                    .slice(task.firstBlock, task.numBlocks);
  // The selection layers of every token, causally, in chunks of whole
  // blocks (a chunk reads the blocks before it as the pass left them).
  constexpr uint32_t kChunkTokens = 1024;
  for (uint32_t block = 0, token = 0; block < blends.size();) {
    uint32_t endBlock = block, count = 0;
    while (endBlock < blends.size() &&
           (count == 0 || count + uint32_t(valid[endBlock]) <= kChunkTokens))
      count += uint32_t(valid[endBlock++]);
    size_t numPages = task.numContextPages + endBlock;
    model::ForwardSequence sequence;
    sequence.tokens = tokens.slice(token, count);
    sequence.positions = positions.slice(token, count);
    sequence.blockIds = llvm::ArrayRef<int32_t>(pages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(pageValid).take_front(numPages);
    sequence.logits = model::LogitsRequest::None;
    sequence.rows = model::RowKind::Prompt;
    if (llvm::Error error = device.forwardLayers(llvm::makeArrayRef(sequence),
                                                 kv::kBlendSelectionLayers))
      return error;
    block = endBlock;
    token += count;
  }
  // How far each token moved at the last of them.
  measure.clear();
  device.tokenDistances(kv::kBlendSelectionLayers - 1, sources, blends, valid,
                        measure);
  return llvm::Error::success();
}

llvm::Error SpanRepair::measureAttention(const SchedulerOutput &step,
                                         const BlendTask &task,
                                         CallStats &stats) {
  auto begin = std::chrono::steady_clock::now();
  // The probe reads the context, the stitched spans and its own blocks.
  std::vector<int32_t> probePages = pages, probeValid = pageValid;
  auto ownPages = llvm::ArrayRef<int32_t>(step.blockIds)
                      .slice(task.firstProbePage, task.numProbePages);
  auto ownValid = llvm::ArrayRef<int32_t>(step.validTokens)
                      .slice(task.firstProbePage, task.numProbePages);
  probePages.insert(probePages.end(), ownPages.begin(), ownPages.end());
  probeValid.insert(probeValid.end(), ownValid.begin(), ownValid.end());
  int64_t length = 0, contextTokens = 0;
  for (size_t page = 0; page < probeValid.size(); ++page) {
    length += probeValid[page];
    if (page < task.numContextPages)
      contextTokens += probeValid[page];
  }
  keyMass.assign(size_t(length), 0.0f);
  auto [firstLayer, endLayer] = repairLayerBand(task.layers, numLayers);
  if (endLayer == 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "question-guided span repair: the model's layer count is unknown");
  model::ForwardSequence sequence;
  sequence.tokens = llvm::ArrayRef<int32_t>(step.tokens)
                        .slice(task.firstProbeToken, task.numProbeTokens);
  sequence.positions = llvm::ArrayRef<int32_t>(step.positions)
                           .slice(task.firstProbeToken, task.numProbeTokens);
  sequence.blockIds = probePages;
  sequence.validTokens = probeValid;
  sequence.logits = model::LogitsRequest::None;
  sequence.rows = model::RowKind::Prompt;
  sequence.keyMass = keyMass;
  sequence.massFirstLayer = firstLayer;
  sequence.massEndLayer = endLayer;
  if (llvm::Error error =
          device.forwardLayers(llvm::makeArrayRef(sequence), endLayer))
    return error;
  measure.assign(keyMass.begin() + contextTokens,
                 keyMass.begin() + contextTokens + task.numTokens);
  stats.probeTokens += task.numProbeTokens;
  stats.probeSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  return llvm::Error::success();
}

llvm::Error SpanRepair::recompute(const BlendTask &task,
                                  llvm::ArrayRef<uint8_t> chosenTokens) {
  // The chosen tokens through every layer in one pass: at every layer a
  // token reads the fresh rows of the chosen tokens before it (written
  // before that layer's attention) and the repair's rows of the others. A
  // guided repair recomputes each run of consecutive chosen tokens as one
  // sequence (its tokens are the last of its page list, cut after its last
  // token); a blend keeps one sequence per token, the attention splits its
  // figures were measured with (a tile's key ranges follow its length).
  batch.clear();
  sequenceValid.clear();
  struct Run {
    uint32_t firstToken, numTokens, lastBlock, lastSlot;
  };
  llvm::SmallVector<Run, 16> runs;
  for (uint32_t block = 0, token = 0; block < task.numBlocks; ++block)
    for (int32_t slot = 0; slot < valid[block]; ++slot, ++token) {
      if (!chosenTokens[token])
        continue;
      if (task.guided && !runs.empty() &&
          runs.back().firstToken + runs.back().numTokens == token) {
        ++runs.back().numTokens;
      } else {
        runs.push_back({token, 1, block, 0});
      }
      runs.back().lastBlock = block;
      runs.back().lastSlot = uint32_t(slot);
    }
  sequenceValid.reserve(runs.size() * pages.size());
  for (const Run &run : runs) {
    size_t numPages = task.numContextPages + run.lastBlock + 1;
    size_t first = sequenceValid.size();
    sequenceValid.insert(sequenceValid.end(), pageValid.begin(),
                         pageValid.begin() + numPages);
    sequenceValid.back() = int32_t(run.lastSlot) + 1;
    model::ForwardSequence &sequence = batch.emplace_back();
    sequence.tokens = tokens.slice(run.firstToken, run.numTokens);
    sequence.positions = positions.slice(run.firstToken, run.numTokens);
    sequence.blockIds = llvm::ArrayRef<int32_t>(pages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(sequenceValid).slice(first, numPages);
    sequence.logits = model::LogitsRequest::None;
    sequence.rows = model::RowKind::Prompt;
  }
  if (!batch.empty())
    if (llvm::Error error = device.forward(batch, output))
      return error;
  batch.clear();
  return llvm::Error::success();
}

llvm::Error SpanRepair::run(const SchedulerOutput &step, const BlendTask &task,
                            CallStats &stats) {
  auto contextPages = llvm::ArrayRef<int32_t>(step.blockIds)
                          .slice(task.firstPage, task.numContextPages);
  auto contextValid = llvm::ArrayRef<int32_t>(step.validTokens)
                          .slice(task.firstPage, task.numContextPages);
  auto blends = llvm::ArrayRef<int32_t>(step.blendBlocks)
                    .slice(task.firstBlock, task.numBlocks);
  auto sources = llvm::ArrayRef<int32_t>(step.sourceBlocks)
                     .slice(task.firstBlock, task.numBlocks);
  auto forced = llvm::ArrayRef<uint8_t>(step.blendForced)
                    .slice(task.firstBlock, task.numBlocks);
  valid = llvm::ArrayRef<int32_t>(step.blendValidTokens)
              .slice(task.firstBlock, task.numBlocks);
  tokens = llvm::ArrayRef<int32_t>(step.tokens)
               .slice(task.firstToken, task.numTokens);
  positions = llvm::ArrayRef<int32_t>(step.positions)
                  .slice(task.firstToken, task.numTokens);

  // The page list of the context and every repair block; a sequence reads
  // a prefix of it, its last page cut at its last token.
  pages.assign(contextPages.begin(), contextPages.end());
  pages.insert(pages.end(), blends.begin(), blends.end());
  pageValid.assign(contextValid.begin(), contextValid.end());
  pageValid.insert(pageValid.end(), valid.begin(), valid.end());

  // Start from the spans' rows: the stitched cache, which layers and
  // tokens the repair does not recompute keep.
  for (size_t b = 0; b < blends.size(); ++b)
    device.copyBlock({uint32_t(sources[b]), uint32_t(blends[b]), 0});

  std::vector<uint8_t> chosen;
  if (!task.guided) {
    if (llvm::Error error = measureDistances(step, task))
      return error;
    std::vector<uint8_t> forcedTokens;
    for (uint32_t block = 0; block < task.numBlocks; ++block)
      forcedTokens.insert(forcedTokens.end(), size_t(valid[block]),
                          forced[block]);
    chosen = selectBlendTokens(measure, forcedTokens, task.percent);
  } else {
    if (llvm::Error error = measureAttention(step, task, stats))
      return error;
    auto candidates = llvm::ArrayRef<uint8_t>(step.blendCandidate)
                          .slice(task.firstBlock, task.numBlocks);
    auto spans = llvm::ArrayRef<uint32_t>(step.blendSpan)
                     .slice(task.firstBlock, task.numBlocks);
    const bool byBlock = task.granularity == kv::RepairGranularity::Block;
    units.clear();
    for (uint32_t block = 0, token = 0; block < task.numBlocks; ++block) {
      if (byBlock)
        units.push_back(
            {0, forced[block] != 0, candidates[block] != 0, spans[block]});
      for (int32_t slot = 0; slot < valid[block]; ++slot, ++token) {
        if (!byBlock)
          units.push_back(
              {0, forced[block] != 0, candidates[block] != 0, spans[block]});
        units.back().mass += measure[token];
      }
    }
    std::vector<uint8_t> chosenUnits =
        selectGuidedUnits(units, task.percent, task.neighbours);
    if (byBlock) {
      for (uint32_t block = 0; block < task.numBlocks; ++block)
        chosen.insert(chosen.end(), size_t(valid[block]), chosenUnits[block]);
    } else {
      chosen = std::move(chosenUnits);
    }
  }
  if (llvm::Error error = recompute(task, chosen))
    return error;
  stats.blendedTokens += uint32_t(llvm::count(chosen, uint8_t(1)));
  return llvm::Error::success();
}

} // namespace spanc::sched
