//===- OpenAiResponse.cpp - Chat and completion answers as OpenAI's -------===//

#include "server/OpenAiResponse.h"

namespace spanc::server {

namespace {

using nlohmann::json;

const char *objectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::Completions)
    return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json envelope(const OpenAiAnswer &answer, bool chunk) {
  return {{"id", answer.id},
          {"object", objectName(answer.endpoint, chunk)},
          {"created", answer.created},
          {"model", answer.model},
          {"choices", json::array()}};
}

/// A choice: completions carry `text`; chat chunks a `delta` (its content
/// left out of a finishing chunk with no text), whole chats a `message`.
json choiceJson(const OpenAiAnswer &answer, size_t index,
                const std::string &text, bool chunk, const char *finishReason) {
  json choice = {{"index", index}, {"logprobs", nullptr}};
  choice["finish_reason"] = finishReason ? json(finishReason) : json();
  if (answer.endpoint == Endpoint::Completions) {
    choice["text"] = text;
  } else if (chunk) {
    choice["delta"] = json::object();
    if (!text.empty() || !finishReason)
      choice["delta"]["content"] = text;
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  }
  return choice;
}

std::string chunkWith(const OpenAiAnswer &answer, json choice) {
  json chunk = envelope(answer, true);
  chunk["choices"].push_back(std::move(choice));
  return dumpJson(chunk);
}

/// A token's text for logprobs: its bytes (a byte-level token may hold
/// part of a character; dumpJson then writes U+FFFD, and `bytes` the
/// truth).
json tokenEntry(const model::Tokenizer &tokenizer, plan::TokenId token,
                float logprob) {
  std::string piece = tokenizer.tokenToPiece(token, false);
  json bytes = json::array();
  for (char c : piece)
    bytes.push_back(int(static_cast<unsigned char>(c)));
  return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

/// A choice's logprobs as OpenAI shapes them (chat: content entries;
/// completions: parallel lists), for the tokens within `text` (a stop
/// string cut off is not answered, nor are its tokens).
json logprobsJson(Endpoint endpoint, const ChoiceResult &result,
                  size_t textBytes, const model::Tokenizer &tokenizer) {
  json content = json::array();
  json tokens = json::array(), tokenLogprobs = json::array(),
       topLogprobs = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t index = 0; index < result.tokens.size() &&
                         index < result.logprobs.size() && offset < textBytes;
       ++index) {
    const plan::TokenId token = result.tokens[index];
    const sched::TokenLogprobs &figures = result.logprobs[index];
    json entry = tokenEntry(tokenizer, token, figures.logprob);
    if (endpoint == Endpoint::ChatCompletions) {
      json top = json::array();
      for (const auto &[other, logprob] : figures.top)
        top.push_back(tokenEntry(tokenizer, other, logprob));
      entry["top_logprobs"] = top;
      content.push_back(entry);
    } else {
      // The sampled token is always among them, as OpenAI answers.
      json top = json::object();
      for (const auto &[other, logprob] : figures.top)
        top[tokenizer.tokenToPiece(other, false)] = logprob;
      top[entry["token"].get<std::string>()] = figures.logprob;
      tokens.push_back(entry["token"]);
      tokenLogprobs.push_back(figures.logprob);
      topLogprobs.push_back(top);
      offsets.push_back(offset);
    }
    offset += entry["token"].get_ref<const std::string &>().size();
  }
  if (endpoint == Endpoint::ChatCompletions)
    return {{"content", content}, {"refusal", nullptr}};
  return {{"tokens", tokens},
          {"token_logprobs", tokenLogprobs},
          {"top_logprobs", topLogprobs},
          {"text_offset", offsets}};
}

} // namespace

std::string openAiRoleChunk(const OpenAiAnswer &answer, size_t choice) {
  json first = choiceJson(answer, choice, "", true, nullptr);
  first["delta"] = {{"role", "assistant"}, {"content", ""}};
  return chunkWith(answer, std::move(first));
}

std::string openAiTextChunk(const OpenAiAnswer &answer, size_t choice,
                            const std::string &text) {
  return chunkWith(answer, choiceJson(answer, choice, text, true, nullptr));
}

std::string openAiFinishChunk(const OpenAiAnswer &answer, size_t choice,
                              const char *finishReason) {
  return chunkWith(answer, choiceJson(answer, choice, "", true, finishReason));
}

std::string openAiUsageChunk(const OpenAiAnswer &answer,
                             const TokenUsage &usage) {
  json chunk = envelope(answer, true);
  chunk["usage"] = usageJson(usage);
  return dumpJson(chunk);
}

std::string openAiWholeAnswer(const OpenAiAnswer &answer,
                              llvm::ArrayRef<OpenAiChoice> choices,
                              const TokenUsage &usage,
                              const model::Tokenizer &tokenizer) {
  json body = envelope(answer, false);
  for (size_t index = 0; index < choices.size(); ++index) {
    const OpenAiChoice &choice = choices[index];
    json item =
        choiceJson(answer, index, choice.text, false, choice.finishReason);
    if (choice.logprobs)
      item["logprobs"] = logprobsJson(answer.endpoint, *choice.logprobs,
                                      choice.text.size(), tokenizer);
    body["choices"].push_back(std::move(item));
  }
  body["usage"] = usageJson(usage);
  return dumpJson(body);
}

TokenUsage openAiUsage(llvm::ArrayRef<uint64_t> promptTokens,
                       const ResponseStream &stream, size_t n) {
  TokenUsage usage;
  for (uint64_t tokens : promptTokens)
    usage.promptTokens += tokens;
  for (size_t choice = 0; choice < stream.numChoices(); ++choice) {
    const ChoiceResult &result = stream.result(choice);
    usage.completionTokens += result.stats.generatedTokens;
    if (choice % n == 0)
      usage.cachedTokens += result.stats.reusedTokens;
  }
  return usage;
}

} // namespace spanc::server
