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

void SpanRepair::prepare(const SchedulerOutput &step, const BlendTask &task,
                         TaskState &state) {
  state.task = &task;
  auto contextPages = llvm::ArrayRef<int32_t>(step.blockIds)
                          .slice(task.firstPage, task.numContextPages);
  auto contextValid = llvm::ArrayRef<int32_t>(step.validTokens)
                          .slice(task.firstPage, task.numContextPages);
  auto blends = llvm::ArrayRef<int32_t>(step.blendBlocks)
                    .slice(task.firstBlock, task.numBlocks);
  auto sources = llvm::ArrayRef<int32_t>(step.sourceBlocks)
                     .slice(task.firstBlock, task.numBlocks);
  state.valid = llvm::ArrayRef<int32_t>(step.blendValidTokens)
                    .slice(task.firstBlock, task.numBlocks);
  state.tokens = llvm::ArrayRef<int32_t>(step.tokens)
                     .slice(task.firstToken, task.numTokens);
  state.positions = llvm::ArrayRef<int32_t>(step.positions)
                        .slice(task.firstToken, task.numTokens);
  state.pages.assign(contextPages.begin(), contextPages.end());
  state.pages.insert(state.pages.end(), blends.begin(), blends.end());
  state.pageValid.assign(contextValid.begin(), contextValid.end());
  state.pageValid.insert(state.pageValid.end(), state.valid.begin(),
                         state.valid.end());
  state.chosen.clear();
  for (size_t b = 0; b < blends.size(); ++b)
    device.copyBlock({uint32_t(sources[b]), uint32_t(blends[b]), 0});
}

llvm::Error SpanRepair::measureDistances(const SchedulerOutput &step,
                                         const TaskState &state) {
  const BlendTask &task = *state.task;
  auto sources = llvm::ArrayRef<int32_t>(step.sourceBlocks)
                     .slice(task.firstBlock, task.numBlocks);
  auto blends = llvm::ArrayRef<int32_t>(step.blendBlocks)
                    .slice(task.firstBlock, task.numBlocks);
  // The selection layers of every token, causally, in chunks of whole
  // blocks (a chunk reads the blocks before it as the pass left them).
  constexpr uint32_t kChunkTokens = 1024;
  for (uint32_t block = 0, token = 0; block < blends.size();) {
    uint32_t endBlock = block, count = 0;
    while (
        endBlock < blends.size() &&
        (count == 0 || count + uint32_t(state.valid[endBlock]) <= kChunkTokens))
      count += uint32_t(state.valid[endBlock++]);
    size_t numPages = task.numContextPages + endBlock;
    model::ForwardSequence sequence;
    sequence.tokens = state.tokens.slice(token, count);
    sequence.positions = state.positions.slice(token, count);
    sequence.blockIds =
        llvm::ArrayRef<int32_t>(state.pages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(state.pageValid).take_front(numPages);
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
  device.tokenDistances(kv::kBlendSelectionLayers - 1, sources, blends,
                        state.valid, measure);
  return llvm::Error::success();
}

void SpanRepair::addProbe(const SchedulerOutput &step, TaskState &state,
                          uint32_t firstLayer, uint32_t endLayer) {
  const BlendTask &task = *state.task;
  // The probe reads the context, the stitched spans and its own blocks.
  state.probePages = state.pages;
  state.probeValid = state.pageValid;
  auto ownPages = llvm::ArrayRef<int32_t>(step.blockIds)
                      .slice(task.firstProbePage, task.numProbePages);
  auto ownValid = llvm::ArrayRef<int32_t>(step.validTokens)
                      .slice(task.firstProbePage, task.numProbePages);
  state.probePages.insert(state.probePages.end(), ownPages.begin(),
                          ownPages.end());
  state.probeValid.insert(state.probeValid.end(), ownValid.begin(),
                          ownValid.end());
  int64_t length = 0;
  state.contextTokens = 0;
  for (size_t page = 0; page < state.probeValid.size(); ++page) {
    length += state.probeValid[page];
    if (page < task.numContextPages)
      state.contextTokens += state.probeValid[page];
  }
  state.keyMass.assign(size_t(length), 0.0f);
  model::ForwardSequence &sequence = batch.emplace_back();
  sequence.tokens = llvm::ArrayRef<int32_t>(step.tokens)
                        .slice(task.firstProbeToken, task.numProbeTokens);
  sequence.positions = llvm::ArrayRef<int32_t>(step.positions)
                           .slice(task.firstProbeToken, task.numProbeTokens);
  sequence.blockIds = state.probePages;
  sequence.validTokens = state.probeValid;
  sequence.logits = model::LogitsRequest::None;
  sequence.rows = model::RowKind::Prompt;
  sequence.keyMass = state.keyMass;
  sequence.massFirstLayer = firstLayer;
  sequence.massEndLayer = endLayer;
}

void SpanRepair::chooseGuided(const SchedulerOutput &step, TaskState &state) {
  const BlendTask &task = *state.task;
  auto forced = llvm::ArrayRef<uint8_t>(step.blendForced)
                    .slice(task.firstBlock, task.numBlocks);
  auto candidates = llvm::ArrayRef<uint8_t>(step.blendCandidate)
                        .slice(task.firstBlock, task.numBlocks);
  auto spans = llvm::ArrayRef<uint32_t>(step.blendSpan)
                   .slice(task.firstBlock, task.numBlocks);
  auto mass = llvm::ArrayRef<float>(state.keyMass)
                  .slice(size_t(state.contextTokens), task.numTokens);
  const bool byBlock = task.granularity == kv::RepairGranularity::Block;
  units.clear();
  for (uint32_t block = 0, token = 0; block < task.numBlocks; ++block) {
    if (byBlock)
      units.push_back(
          {0, forced[block] != 0, candidates[block] != 0, spans[block]});
    for (int32_t slot = 0; slot < state.valid[block]; ++slot, ++token) {
      if (!byBlock)
        units.push_back(
            {0, forced[block] != 0, candidates[block] != 0, spans[block]});
      units.back().mass += mass[token];
    }
  }
  std::vector<uint8_t> chosenUnits =
      selectGuidedUnits(units, task.percent, task.neighbours);
  if (byBlock) {
    for (uint32_t block = 0; block < task.numBlocks; ++block)
      state.chosen.insert(state.chosen.end(), size_t(state.valid[block]),
                          chosenUnits[block]);
  } else {
    state.chosen = std::move(chosenUnits);
  }
}

void SpanRepair::addRecompute(TaskState &state) {
  const BlendTask &task = *state.task;
  // The chosen tokens through every layer in one pass: at every layer a
  // token reads the fresh rows of the chosen tokens before it (written
  // before that layer's attention) and the repair's rows of the others. A
  // guided repair recomputes each run of consecutive chosen tokens as one
  // sequence (its tokens are the last of its page list, cut after its last
  // token); a blend keeps one sequence per token, the attention splits its
  // figures were measured with (a tile's key ranges follow its length).
  struct Run {
    uint32_t firstToken, numTokens, lastBlock, lastSlot;
  };
  llvm::SmallVector<Run, 16> runs;
  for (uint32_t block = 0, token = 0; block < task.numBlocks; ++block)
    for (int32_t slot = 0; slot < state.valid[block]; ++slot, ++token) {
      if (!state.chosen[token])
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
  // Sequences point into sequenceValid: it must not grow past its reserve.
  state.sequenceValid.clear();
  state.sequenceValid.reserve(runs.size() * state.pages.size());
  for (const Run &run : runs) {
    size_t numPages = task.numContextPages + run.lastBlock + 1;
    size_t first = state.sequenceValid.size();
    state.sequenceValid.insert(state.sequenceValid.end(),
                               state.pageValid.begin(),
                               state.pageValid.begin() + numPages);
    state.sequenceValid.back() = int32_t(run.lastSlot) + 1;
    model::ForwardSequence &sequence = batch.emplace_back();
    sequence.tokens = state.tokens.slice(run.firstToken, run.numTokens);
    sequence.positions = state.positions.slice(run.firstToken, run.numTokens);
    sequence.blockIds =
        llvm::ArrayRef<int32_t>(state.pages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(state.sequenceValid).slice(first, numPages);
    sequence.logits = model::LogitsRequest::None;
    sequence.rows = model::RowKind::Prompt;
  }
}

llvm::Error
SpanRepair::run(const SchedulerOutput &step,
                llvm::function_ref<CallStats &(plan::CallId)> statsOf) {
  if (step.blends.empty())
    return llvm::Error::success();
  // Sized once: the batches below point into the states.
  if (states.size() < step.blends.size())
    states.resize(step.blends.size());
  for (size_t index = 0; index < step.blends.size(); ++index)
    prepare(step, step.blends[index], states[index]);
  auto forwardBatch = [&]() -> llvm::Error {
    if (batch.empty())
      return llvm::Error::success();
    llvm::Error error = device.forward(batch, output);
    batch.clear();
    return error;
  };

  // Blends, one at a time: each measures with its own selection pass.
  for (size_t index = 0; index < step.blends.size(); ++index) {
    TaskState &state = states[index];
    const BlendTask &task = *state.task;
    if (task.guided)
      continue;
    if (llvm::Error error = measureDistances(step, state))
      return error;
    auto forced = llvm::ArrayRef<uint8_t>(step.blendForced)
                      .slice(task.firstBlock, task.numBlocks);
    std::vector<uint8_t> forcedTokens;
    for (uint32_t block = 0; block < task.numBlocks; ++block)
      forcedTokens.insert(forcedTokens.end(), size_t(state.valid[block]),
                          forced[block]);
    state.chosen = selectBlendTokens(measure, forcedTokens, task.percent);
    addRecompute(state);
    if (llvm::Error error = forwardBatch())
      return error;
    statsOf(task.call).blendedTokens +=
        uint32_t(llvm::count(state.chosen, uint8_t(1)));
  }

  // Question-guided repairs, together: every probe in one pass (through the
  // highest band's last layer), then every recompute in one.
  auto begin = std::chrono::steady_clock::now();
  uint32_t endLayers = 0, probeTokens = 0;
  for (size_t index = 0; index < step.blends.size(); ++index) {
    TaskState &state = states[index];
    if (!state.task->guided)
      continue;
    auto [firstLayer, endLayer] =
        repairLayerBand(state.task->layers, numLayers);
    if (endLayer == 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "question-guided span repair: the model's layer count is unknown");
    addProbe(step, state, firstLayer, endLayer);
    endLayers = std::max(endLayers, endLayer);
    probeTokens += state.task->numProbeTokens;
  }
  if (batch.empty())
    return llvm::Error::success();
  if (llvm::Error error = device.forwardLayers(batch, endLayers))
    return error;
  batch.clear();
  // Each call is charged the probe pass in proportion to its tokens.
  const double probeSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  for (size_t index = 0; index < step.blends.size(); ++index) {
    TaskState &state = states[index];
    if (!state.task->guided)
      continue;
    CallStats &stats = statsOf(state.task->call);
    stats.probeTokens += state.task->numProbeTokens;
    stats.probeSeconds += probeSeconds * state.task->numProbeTokens /
                          std::max<uint32_t>(1, probeTokens);
    chooseGuided(step, state);
    addRecompute(state);
    stats.blendedTokens += uint32_t(llvm::count(state.chosen, uint8_t(1)));
  }
  return forwardBatch();
}

} // namespace spanc::sched
