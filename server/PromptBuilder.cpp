//===- PromptBuilder.cpp - The model calls an OpenAI request makes --------===//

#include "server/PromptBuilder.h"

#include "server/ApiError.h"

#include <algorithm>
#include <random>

namespace spanc::server {

namespace {

const char *roleLabel(plan::MessageRole role) {
  switch (role) {
  case plan::MessageRole::System:
    return "system";
  case plan::MessageRole::User:
    return "user";
  case plan::MessageRole::Assistant:
    return "assistant";
  }
  return "?";
}

llvm::Expected<plan::PlanSegment>
chatPrompt(const CompletionRequest &request,
           const plan::MessageEncoder &encoder) {
  // One causal segment, a piece per message: the layout lowering gives a
  // gen over the same messages, so their blocks hash alike.
  plan::PlanSegment segment;
  segment.kind = plan::SegmentKind::Prefix;
  for (const ChatMessage &message : request.messages) {
    auto tokens = encoder.encodeMessage(message.role, message.content);
    if (!tokens)
      return apiError(400,
                      "a message cannot be encoded: " +
                          llvm::toString(tokens.takeError()),
                      "messages");
    plan::Piece &piece = segment.pieces.emplace_back();
    piece.tokens = std::move(*tokens);
    piece.label = roleLabel(message.role);
  }
  plan::Piece &header = segment.pieces.emplace_back();
  header.tokens = encoder.assistantHeader();
  header.label = "assistant-header";
  return segment;
}

plan::PlanSegment completionPrompt(llvm::StringRef text,
                                   const model::Tokenizer &tokenizer) {
  plan::PlanSegment segment;
  segment.kind = plan::SegmentKind::Prefix;
  plan::Piece &piece = segment.pieces.emplace_back();
  if (tokenizer.addBosByDefault() && tokenizer.bosId() >= 0)
    piece.tokens.push_back(tokenizer.bosId());
  // Special tokens are parsed, as vLLM and llama.cpp do: a prompt written
  // in the chat format hits the blocks a chat request left.
  std::vector<int32_t> tokens = tokenizer.encode(text, true);
  piece.tokens.insert(piece.tokens.end(), tokens.begin(), tokens.end());
  piece.label = "prompt";
  return segment;
}

uint64_t countTokens(const plan::PlanSegment &segment) {
  uint64_t count = 0;
  for (const plan::Piece &piece : segment.pieces)
    count += piece.tokens.size();
  return count;
}

} // namespace

llvm::Expected<RequestCalls> buildCalls(const CompletionRequest &request,
                                        const plan::MessageEncoder &encoder,
                                        const model::Tokenizer &tokenizer,
                                        const PromptLimits &limits) {
  std::vector<plan::PlanSegment> prompts;
  if (request.endpoint == Endpoint::ChatCompletions) {
    auto segment = chatPrompt(request, encoder);
    if (!segment)
      return segment.takeError();
    prompts.push_back(std::move(*segment));
  } else {
    for (size_t index = 0; index < request.prompts.size(); ++index) {
      if (index < request.promptTokens.size() &&
          !request.promptTokens[index].empty()) {
        // Token ids are taken as given (no BOS added), as vLLM does.
        plan::PlanSegment &segment = prompts.emplace_back();
        segment.kind = plan::SegmentKind::Prefix;
        plan::Piece &piece = segment.pieces.emplace_back();
        piece.tokens = request.promptTokens[index];
        piece.label = "prompt-ids";
        continue;
      }
      prompts.push_back(completionPrompt(request.prompts[index], tokenizer));
    }
  }

  RequestCalls result;
  const char *promptField =
      request.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  // Per prompt: max_tokens as far as the KV cache holds it.
  std::vector<int64_t> maxTokens;
  for (const plan::PlanSegment &prompt : prompts) {
    uint64_t tokens = countTokens(prompt);
    if (tokens == 0)
      return apiError(400, "the prompt is empty", promptField);
    if (limits.maxPromptTokens > 0 && tokens > uint64_t(limits.maxPromptTokens))
      return apiError(400,
                      "the prompt has " + std::to_string(tokens) +
                          " tokens, more than the server's limit of " +
                          std::to_string(limits.maxPromptTokens) +
                          " (--max-prompt-tokens)",
                      promptField);
    if (limits.contextLength > 0 && tokens > uint64_t(limits.contextLength))
      return apiError(400,
                      "the prompt has " + std::to_string(tokens) +
                          " tokens, more than the model's context of " +
                          std::to_string(limits.contextLength) + " tokens",
                      promptField);
    // Refused here, not after the engine finds it cannot be admitted.
    if (limits.kvCacheTokens > 0 && tokens > uint64_t(limits.kvCacheTokens))
      return apiError(400,
                      "the prompt has " + std::to_string(tokens) +
                          " tokens, more than the server's whole KV cache "
                          "of " +
                          std::to_string(limits.kvCacheTokens) +
                          " tokens (--kv-cache)",
                      promptField);
    if (limits.contextLength > 0 &&
        tokens + uint64_t(request.maxTokens) > uint64_t(limits.contextLength))
      return apiError(400,
                      "the prompt's " + std::to_string(tokens) +
                          " tokens and " + request.maxTokensField + " " +
                          std::to_string(request.maxTokens) +
                          " exceed the model's context of " +
                          std::to_string(limits.contextLength) + " tokens",
                      request.maxTokensField);
    // The prompt and what is generated must fit in the cache: past it the
    // call would fail mid-answer, its text lost. (A prompt that fills the
    // cache still gets its one token: the last sampled is never stored.)
    int64_t fits =
        limits.kvCacheTokens > 0
            ? std::max<int64_t>(1, limits.kvCacheTokens - int64_t(tokens))
            : request.maxTokens;
    maxTokens.push_back(std::min(request.maxTokens, fits));
    result.promptTokens.push_back(tokens);
  }

  // Without a seed, sampled choices differ from request to request.
  std::random_device entropy;
  const uint64_t baseSeed =
      request.seed ? *request.seed : (uint64_t(entropy()) << 32) | entropy();
  for (size_t index = 0; index < prompts.size(); ++index)
    for (int64_t choice = 0; choice < request.n; ++choice) {
      plan::Call &call = result.calls.emplace_back();
      call.query = request.endpoint == Endpoint::ChatCompletions
                       ? "chat.completions"
                       : "completions";
      call.options.maxTokens = maxTokens[index];
      call.options.temperature = request.temperature;
      call.options.topP = request.topP;
      call.options.topK = request.topK;
      call.options.logitBias = request.logitBias;
      call.options.logprobs =
          request.logprobs ? int32_t(*request.logprobs) : -1;
      // Choices of one seeded request differ from one another and are
      // reproducible as a whole.
      call.options.seed = baseSeed + uint64_t(choice);
      call.options.stop = request.stop;
      call.segments.push_back(prompts[index]);
    }
  return result;
}

} // namespace spanc::server
