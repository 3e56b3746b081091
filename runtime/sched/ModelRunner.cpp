//===- ModelRunner.cpp - Runs a scheduled step on a backend and samples ---===//

#include "runtime/sched/ModelRunner.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace spanc::sched {

ModelRunner::ModelRunner(backend::Backend &backend,
                         const model::Tokenizer &tokenizer,
                         bool keepFirstLogits, uint32_t numLayers)
    : device(backend), tokenizer(tokenizer), keepFirstLogits(keepFirstLogits),
      repair(backend, numLayers) {}

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

TokenLogprobs ModelRunner::tokenLogprobs(llvm::ArrayRef<float> logits,
                                         plan::TokenId token, size_t top) {
  // log softmax, in double: logit - log(sum(exp(logit - max))) - max.
  float maxLogit = logits.empty() ? 0.0f : logits[0];
  for (float logit : logits)
    maxLogit = std::max(maxLogit, logit);
  double sum = 0;
  for (float logit : logits)
    sum += std::exp(double(logit) - maxLogit);
  const double logSum = double(maxLogit) + std::log(sum);
  TokenLogprobs result;
  result.logprob = float(double(logits[size_t(token)]) - logSum);
  top = std::min(top, logits.size());
  if (top == 0)
    return result;
  ranked.resize(logits.size());
  for (size_t index = 0; index < logits.size(); ++index)
    ranked[index] = {logits[index], plan::TokenId(index)};
  // Likeliest first, ties to the lower id.
  std::partial_sort(ranked.begin(), ranked.begin() + top, ranked.end(),
                    [](const auto &a, const auto &b) {
                      return a.first > b.first ||
                             (a.first == b.first && a.second < b.second);
                    });
  for (size_t index = 0; index < top; ++index)
    result.top.emplace_back(ranked[index].second,
                            float(double(ranked[index].first) - logSum));
  return result;
}

llvm::Error ModelRunner::execute(const SchedulerOutput &step,
                                 RunnerOutput &result) {
  result.clear();
  auto mark = std::chrono::steady_clock::now();
  // Copy-on-write first (a copy reads a block the relocations or this
  // step's writes may change), then the moves and duplicates reused blocks
  // need, before any read.
  for (const kv::RelocationOp &copy : step.blockCopies)
    device.copyBlock(copy);
  device.relocate(step.stepPlan.relocation);
  lap(mark, phaseTimes.relocateSeconds);
  if (llvm::Error error = repair.run(
          step, [&](plan::CallId call) -> auto & {
            return (*outcomes)[call].stats;
          }))
    return error;
  lap(mark, phaseTimes.repairSeconds);
  if (step.sequences.empty())
    return llvm::Error::success();

  batch.clear();
  for (const ScheduledSequence &scheduled : step.sequences) {
    model::ForwardSequence &sequence = batch.emplace_back();
    sequence.tokens = step.tokensOf(scheduled);
    sequence.positions = step.positionsOf(scheduled);
    sequence.queryIndices = step.queryIndicesOf(scheduled);
    sequence.blockIds = step.blockIdsOf(scheduled);
    sequence.validTokens = step.validTokensOf(scheduled);
    sequence.spanPages = step.spanPagesOf(scheduled);
    sequence.spanScaling = step.spanScaling;
    sequence.logits = scheduled.wantsLogits ? model::LogitsRequest::Last
                                            : model::LogitsRequest::None;
    sequence.rows = scheduled.rows;
  }
  phaseTimes.sequences += batch.size();
  lap(mark, phaseTimes.prepareSeconds);
  if (llvm::Error error = device.forward(batch, forwardOutput))
    return error;
  lap(mark, phaseTimes.forwardSeconds);
  auto timeSampling =
      llvm::make_scope_exit([&] { lap(mark, phaseTimes.sampleSeconds); });

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
    const llvm::ArrayRef<float> row(logits, size_t(forwardOutput.vocabSize));
    llvm::ArrayRef<float> sampledRow = row;
    if (!call.options.logitBias.empty()) {
      biased.assign(row.begin(), row.end());
      for (const auto &[token, bias] : call.options.logitBias)
        if (token >= 0 && size_t(token) < biased.size())
          biased[size_t(token)] += bias;
      sampledRow = biased;
    }
    SampledToken &sampled = result.sampled.emplace_back();
    sampled.sequence = uint32_t(s);
    sampled.token = samplerFor(scheduled.call).sample(sampledRow);
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
    if (call.options.logprobs >= 0)
      outcome.logprobs.push_back(
          tokenLogprobs(row, sampled.token, size_t(call.options.logprobs)));
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
