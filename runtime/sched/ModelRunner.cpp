//===- ModelRunner.cpp - Runs a scheduled step on a backend and samples ---===//

#include "runtime/sched/ModelRunner.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>

namespace spanc::sched {

ModelRunner::ModelRunner(backend::Backend &backend,
                         const model::Tokenizer &tokenizer,
                         bool keepFirstLogits)
    : device(backend), tokenizer(tokenizer), keepFirstLogits(keepFirstLogits) {}

void ModelRunner::beginRun(const plan::Plan &newPlan,
                           std::vector<CallOutcome> &runOutcomes,
                           const TokenCallback &tokenCallback) {
  plan = &newPlan;
  outcomes = &runOutcomes;
  onToken = &tokenCallback;
  samplers.clear();
  samplers.resize(newPlan.calls.size());
  generated = 0;
}

void ModelRunner::endRun() {
  plan = nullptr;
  outcomes = nullptr;
  onToken = nullptr;
  samplers.clear();
}

model::Sampler &ModelRunner::samplerFor(plan::CallId call) {
  std::unique_ptr<model::Sampler> &sampler = samplers[call];
  if (!sampler) {
    const plan::GenOptions &options = plan->calls[call].options;
    model::SamplingParams params;
    params.temperature = float(options.temperature);
    params.topK = int(options.topK);
    params.topP = float(options.topP);
    params.seed = options.seed;
    sampler = std::make_unique<model::Sampler>(params);
  }
  return *sampler;
}

llvm::Error ModelRunner::runBlend(const SchedulerOutput &step,
                                  const BlendTask &task) {
  auto contextPages = llvm::ArrayRef<int32_t>(step.blockIds)
                          .slice(task.firstPage, task.numContextPages);
  auto contextValid = llvm::ArrayRef<int32_t>(step.validTokens)
                          .slice(task.firstPage, task.numContextPages);
  auto blends = llvm::ArrayRef<int32_t>(step.blendBlocks)
                    .slice(task.firstBlock, task.numBlocks);
  auto sources = llvm::ArrayRef<int32_t>(step.sourceBlocks)
                     .slice(task.firstBlock, task.numBlocks);
  auto valid = llvm::ArrayRef<int32_t>(step.blendValidTokens)
                   .slice(task.firstBlock, task.numBlocks);
  auto forced = llvm::ArrayRef<uint8_t>(step.blendForced)
                    .slice(task.firstBlock, task.numBlocks);
  auto tokens = llvm::ArrayRef<int32_t>(step.tokens)
                    .slice(task.firstToken, task.numTokens);
  auto positions = llvm::ArrayRef<int32_t>(step.positions)
                       .slice(task.firstToken, task.numTokens);

  // The page list of the context and every blend block; a sequence reads
  // a prefix of it, its last page cut at its last token.
  blendPages.assign(contextPages.begin(), contextPages.end());
  blendPages.insert(blendPages.end(), blends.begin(), blends.end());
  blendPageValid.assign(contextValid.begin(), contextValid.end());
  blendPageValid.insert(blendPageValid.end(), valid.begin(), valid.end());

  // 1. Start from the span's rows: layers the blend does not recompute
  //    keep them.
  for (size_t b = 0; b < blends.size(); ++b)
    device.copyBlock({uint32_t(sources[b]), uint32_t(blends[b]), 0});

  // 2. The selection layers of every token, causally, in chunks of whole
  //    blocks (a chunk reads the blocks before it as the pass left them).
  constexpr uint32_t kChunkTokens = 1024;
  for (uint32_t block = 0, token = 0; block < blends.size();) {
    uint32_t endBlock = block, count = 0;
    while (endBlock < blends.size() &&
           (count == 0 || count + uint32_t(valid[endBlock]) <= kChunkTokens))
      count += uint32_t(valid[endBlock++]);
    size_t numPages = contextPages.size() + endBlock;
    model::ForwardSequence sequence;
    sequence.tokens = tokens.slice(token, count);
    sequence.positions = positions.slice(token, count);
    sequence.blockIds =
        llvm::ArrayRef<int32_t>(blendPages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(blendPageValid).take_front(numPages);
    sequence.logits = model::LogitsRequest::None;
    sequence.rows = model::RowKind::Prompt;
    if (llvm::Error error = device.forwardLayers(llvm::makeArrayRef(sequence),
                                                 kv::kBlendSelectionLayers))
      return error;
    block = endBlock;
    token += count;
  }

  // 3. How far each token moved, and which tokens to recompute: every
  //    token of a forced block, then the `percent` % of the others that
  //    moved most (ties to the earlier token, so a hit chooses as a miss).
  blendDistances.clear();
  device.tokenDistances(kv::kBlendSelectionLayers - 1, sources, blends, valid,
                        blendDistances);
  blendChosen.assign(tokens.size(), 0);
  blendOrder.clear();
  for (uint32_t block = 0, token = 0; block < blends.size(); ++block)
    for (int32_t slot = 0; slot < valid[block]; ++slot, ++token) {
      if (forced[block])
        blendChosen[token] = 1;
      else
        blendOrder.push_back(token);
    }
  const size_t numChosen = std::min(
      blendOrder.size(), (size_t(task.numTokens) * task.percent + 99) / 100);
  std::partial_sort(blendOrder.begin(), blendOrder.begin() + numChosen,
                    blendOrder.end(), [&](uint32_t a, uint32_t b) {
                      return blendDistances[a] > blendDistances[b] ||
                             (blendDistances[a] == blendDistances[b] && a < b);
                    });
  for (size_t index = 0; index < numChosen; ++index)
    blendChosen[blendOrder[index]] = 1;

  // 4. Recompute the chosen tokens through every layer, one sequence each,
  //    in one pass: at every layer a token reads the fresh rows of the
  //    chosen tokens before it (written before that layer's attention) and
  //    the blend's rows of the others.
  batch.clear();
  blendSequenceValid.clear();
  llvm::SmallVector<std::pair<uint32_t, uint32_t>, 64> chosen; // token, block
  for (uint32_t block = 0, token = 0; block < blends.size(); ++block)
    for (int32_t slot = 0; slot < valid[block]; ++slot, ++token)
      if (blendChosen[token])
        chosen.push_back({token, block});
  blendSequenceValid.reserve(chosen.size() *
                             (contextPages.size() + blends.size()));
  for (auto [token, block] : chosen) {
    size_t numPages = contextPages.size() + block + 1;
    size_t first = blendSequenceValid.size();
    blendSequenceValid.insert(blendSequenceValid.end(), blendPageValid.begin(),
                              blendPageValid.begin() + numPages);
    // Cut the last page at the token: it is the sequence's last.
    int32_t blockStart = int32_t(token);
    for (uint32_t b = 0; b < block; ++b)
      blockStart -= valid[b];
    blendSequenceValid.back() = blockStart + 1;
    model::ForwardSequence &sequence = batch.emplace_back();
    sequence.tokens = tokens.slice(token, 1);
    sequence.positions = positions.slice(token, 1);
    sequence.blockIds =
        llvm::ArrayRef<int32_t>(blendPages).take_front(numPages);
    sequence.validTokens =
        llvm::ArrayRef<int32_t>(blendSequenceValid).slice(first, numPages);
    sequence.logits = model::LogitsRequest::None;
    sequence.rows = model::RowKind::Prompt;
  }
  if (!batch.empty())
    if (llvm::Error error = device.forward(batch, forwardOutput))
      return error;
  batch.clear();
  (*outcomes)[task.call].stats.blendedTokens += uint32_t(chosen.size());
  return llvm::Error::success();
}

void ModelRunner::copyBlocks(llvm::ArrayRef<kv::RelocationOp> copies) {
  for (const kv::RelocationOp &copy : copies)
    device.copyBlock(copy);
}

llvm::Error ModelRunner::execute(const SchedulerOutput &step,
                                 RunnerOutput &result) {
  result.clear();
  // The moves and duplicates reused blocks need come before any read.
  device.relocate(step.stepPlan.relocation);
  for (const BlendTask &task : step.blends)
    if (llvm::Error error = runBlend(step, task))
      return error;
  if (step.sequences.empty())
    return llvm::Error::success();

  batch.clear();
  for (const ScheduledSequence &scheduled : step.sequences) {
    model::ForwardSequence &sequence = batch.emplace_back();
    sequence.tokens = step.tokensOf(scheduled);
    sequence.positions = step.positionsOf(scheduled);
    sequence.blockIds = step.blockIdsOf(scheduled);
    sequence.validTokens = step.validTokensOf(scheduled);
    sequence.spanPages = step.spanPagesOf(scheduled);
    sequence.spanScaling = step.spanScaling;
    sequence.logits = scheduled.wantsLogits ? model::LogitsRequest::Last
                                            : model::LogitsRequest::None;
    sequence.rows = scheduled.rows;
  }
  if (llvm::Error error = device.forward(batch, forwardOutput))
    return error;

  // Sample, check for the end, record and stream.
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    const ScheduledSequence &scheduled = step.sequences[s];
    if (!scheduled.sample)
      continue;
    const plan::Call &call = plan->calls[scheduled.call];
    CallOutcome &outcome = (*outcomes)[scheduled.call];
    const float *logits = forwardOutput.row(forwardOutput.rowOffsets[s]);
    if (scheduled.completesPrompt && keepFirstLogits &&
        outcome.firstLogits.empty())
      outcome.firstLogits.assign(logits, logits + forwardOutput.vocabSize);
    SampledToken &sampled = result.sampled.emplace_back();
    sampled.sequence = uint32_t(s);
    sampled.token = samplerFor(scheduled.call)
                        .sample(llvm::ArrayRef<float>(
                            logits, size_t(forwardOutput.vocabSize)));
    sampled.first =
        outcome.tokens.empty() && outcome.stats.generatedTokens == 0;
    // max_tokens = 0 generates nothing, as `spanc generate -n 0` does: the
    // prompt is computed (and cached), and its first sample ends the call
    // as an end of turn would, unrecorded.
    sampled.endOfGeneration = tokenizer.isEndOfGeneration(sampled.token) ||
                              call.options.maxTokens <= 0;
    sampled.stop = sampled.endOfGeneration;
    if (sampled.stop)
      continue;
    outcome.tokens.push_back(sampled.token);
    ++outcome.stats.generatedTokens;
    ++generated;
    std::string piece = tokenizer.tokenToPiece(sampled.token, false);
    outcome.text += piece;
    if (*onToken && !call.cacheOnly)
      (*onToken)(scheduled.call, piece);
    for (const std::string &stopText : call.options.stop)
      if (!stopText.empty() && llvm::StringRef(outcome.text).endswith(stopText))
        sampled.stop = true;
    if (int64_t(outcome.tokens.size()) >= call.options.maxTokens)
      sampled.stop = true;
  }
  return llvm::Error::success();
}

} // namespace spanc::sched
