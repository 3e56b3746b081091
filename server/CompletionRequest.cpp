//===- CompletionRequest.cpp - An OpenAI completion request, parsed -------===//

#include "server/CompletionRequest.h"

#include "server/ApiError.h"
#include "support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>

namespace spanc::server {

namespace {

using nlohmann::json;

llvm::Error badField(const std::string &field, const std::string &what) {
  return apiError(400, "'" + field + "' " + what, field);
}

/// An optional number field within [low, high].
llvm::Error readNumber(const json &body, const char *field, double low,
                       double high, double &value) {
  auto found = body.find(field);
  if (found == body.end() || found->is_null())
    return llvm::Error::success();
  if (!found->is_number())
    return badField(field, "must be a number");
  double number = found->get<double>();
  if (!(number >= low && number <= high))
    return badField(field, "must be in [" + json(low).dump() + ", " +
                               json(high).dump() + "], not " + found->dump());
  value = number;
  return llvm::Error::success();
}

/// An optional integer field within [low, high].
llvm::Error readInteger(const json &body, const char *field, int64_t low,
                        int64_t high, std::optional<int64_t> &value) {
  auto found = body.find(field);
  if (found == body.end() || found->is_null())
    return llvm::Error::success();
  if (!found->is_number_integer())
    return badField(field, "must be an integer");
  // Unsigned values past int64 are out of range too.
  if (found->is_number_unsigned() &&
      found->get<uint64_t>() > uint64_t(INT64_MAX))
    return badField(field, "must be at most " + std::to_string(high));
  int64_t number = found->get<int64_t>();
  if (number < low || number > high)
    return badField(field, "must be in [" + std::to_string(low) + ", " +
                               std::to_string(high) + "], not " +
                               std::to_string(number));
  value = number;
  return llvm::Error::success();
}

llvm::Expected<plan::MessageRole> readRole(const json &role, size_t index) {
  std::string field = "messages[" + std::to_string(index) + "].role";
  if (!role.is_string())
    return badField(field, "must be a string");
  const std::string &name = role.get_ref<const std::string &>();
  // OpenAI's newer name for the system role.
  if (name == "system" || name == "developer")
    return plan::MessageRole::System;
  if (name == "user")
    return plan::MessageRole::User;
  if (name == "assistant")
    return plan::MessageRole::Assistant;
  return badField(field, "must be system, developer, user or assistant, not '" +
                             name + "'");
}

/// A message's content: a string, or an array of text parts.
llvm::Expected<std::string> readContent(const json &content, size_t index) {
  std::string field = "messages[" + std::to_string(index) + "].content";
  if (content.is_string())
    return content.get<std::string>();
  if (!content.is_array())
    return badField(field, "must be a string or an array of text parts");
  std::string text;
  for (const json &part : content) {
    if (!part.is_object() || part.value("type", "") != "text" ||
        !part.contains("text") || !part["text"].is_string())
      return badField(field, "has a part that is not {\"type\": \"text\", "
                             "\"text\": STRING} (only text is supported)");
    text += part["text"].get<std::string>();
  }
  return text;
}

llvm::Error readMessages(const json &body, CompletionRequest &request) {
  auto found = body.find("messages");
  if (found == body.end())
    return badField("messages", "is required");
  if (!found->is_array() || found->empty())
    return badField("messages", "must be a non-empty array");
  for (size_t index = 0; index < found->size(); ++index) {
    const json &message = (*found)[index];
    if (!message.is_object() || !message.contains("role") ||
        !message.contains("content"))
      return badField("messages[" + std::to_string(index) + "]",
                      "must be an object with a role and a content");
    for (const char *field : {"tool_calls", "function_call"})
      if (message.contains(field) && !message[field].is_null())
        return badField("messages[" + std::to_string(index) + "]." + field,
                        "is not supported: this server has no function "
                        "calling");
    auto role = readRole(message["role"], index);
    if (!role)
      return role.takeError();
    auto content = readContent(message["content"], index);
    if (!content)
      return content.takeError();
    request.messages.push_back({*role, std::move(*content)});
  }
  return llvm::Error::success();
}

/// A token-id prompt: ids in [0, vocabulary).
llvm::Error readTokenPrompt(const json &ids, CompletionRequest &request,
                            const RequestLimits &limits) {
  std::vector<int32_t> tokens;
  tokens.reserve(ids.size());
  for (const json &id : ids) {
    if (!id.is_number_unsigned() ||
        id.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()) ||
        (limits.vocabSize > 0 &&
         id.get<uint64_t>() >= uint64_t(limits.vocabSize)))
      return badField("prompt", "token ids must be integers in [0, " +
                                    (limits.vocabSize > 0
                                         ? std::to_string(limits.vocabSize - 1)
                                         : std::string("2^31")) +
                                    "]");
    tokens.push_back(int32_t(id.get<uint64_t>()));
  }
  if (tokens.empty())
    return badField("prompt", "a token-id prompt is empty");
  request.prompts.emplace_back();
  request.promptTokens.push_back(std::move(tokens));
  return llvm::Error::success();
}

llvm::Error readPrompts(const json &body, CompletionRequest &request,
                        const RequestLimits &limits) {
  auto found = body.find("prompt");
  if (found == body.end())
    return badField("prompt", "is required");
  if (found->is_string()) {
    request.prompts.push_back(found->get<std::string>());
    request.promptTokens.emplace_back();
    return llvm::Error::success();
  }
  if (!found->is_array() || found->empty())
    return badField("prompt", "must be a string, a non-empty array of "
                              "strings, token ids, or arrays of token ids");
  // OpenAI's shapes: [1, 2, 3] is one prompt of token ids.
  if (found->front().is_number())
    return readTokenPrompt(*found, request, limits);
  if (int64_t(found->size()) > limits.maxPrompts)
    return badField("prompt", "holds more than " +
                                  std::to_string(limits.maxPrompts) +
                                  " prompts");
  const bool ids = found->front().is_array();
  for (const json &prompt : *found) {
    if (ids && prompt.is_array()) {
      if (auto error = readTokenPrompt(prompt, request, limits))
        return error;
      continue;
    }
    if (ids || !prompt.is_string())
      return badField("prompt", "must hold strings or arrays of token ids, "
                                "not both");
    request.prompts.push_back(prompt.get<std::string>());
    request.promptTokens.emplace_back();
  }
  return llvm::Error::success();
}

llvm::Error readStop(const json &body, CompletionRequest &request,
                     const RequestLimits &limits) {
  auto found = body.find("stop");
  if (found == body.end() || found->is_null())
    return llvm::Error::success();
  if (found->is_string()) {
    if (!found->get_ref<const std::string &>().empty())
      request.stop.push_back(found->get<std::string>());
    return llvm::Error::success();
  }
  if (!found->is_array())
    return badField("stop", "must be a string or an array of strings");
  if (found->size() > limits.maxStopStrings)
    return badField("stop", "holds more than " +
                                std::to_string(limits.maxStopStrings) +
                                " strings");
  for (const json &stop : *found) {
    if (!stop.is_string())
      return badField("stop", "must hold strings");
    if (!stop.get_ref<const std::string &>().empty())
      request.stop.push_back(stop.get<std::string>());
  }
  return llvm::Error::success();
}

llvm::Error readBool(const json &object, const char *field,
                     const std::string &name, bool &value) {
  auto found = object.find(field);
  if (found == object.end() || found->is_null())
    return llvm::Error::success();
  if (!found->is_boolean())
    return badField(name, "must be true or false");
  value = found->get<bool>();
  return llvm::Error::success();
}

/// A field the server does not honour: accepted only when absent, null or
/// `isDefault` (what asks for the behaviour the server has anyway).
llvm::Error refuseUnless(const json &body, const char *field,
                         const std::function<bool(const json &)> &isDefault,
                         const std::string &why) {
  auto found = body.find(field);
  if (found == body.end() || found->is_null() || isDefault(*found))
    return llvm::Error::success();
  return apiError(400, "'" + std::string(field) + "' is not supported: " + why,
                  field);
}

bool isZero(const json &value) { return value.is_number() && value == 0; }
bool isFalse(const json &value) { return value.is_boolean() && !value; }
bool isEmptyArray(const json &value) {
  return value.is_array() && value.empty();
}

/// What OpenAI defines and the server does not do.
llvm::Error refuseUnsupported(const json &body, Endpoint endpoint, int64_t n) {
  const bool chat = endpoint == Endpoint::ChatCompletions;
  const char *noTools = "this server has no function calling";
  for (const char *field : {"tools", "functions"})
    if (llvm::Error error = refuseUnless(body, field, isEmptyArray, noTools))
      return error;
  for (const char *field : {"tool_choice", "function_call"})
    if (llvm::Error error = refuseUnless(
            body, field, [](const json &value) { return value == "none"; },
            std::string(noTools) + " (only \"none\")"))
      return error;
  if (llvm::Error error = refuseUnless(
          body, "response_format",
          [](const json &value) {
            return value.is_object() && value.size() == 1 &&
                   value.value("type", "") == "text";
          },
          "only {\"type\": \"text\"} (no json_object or json_schema "
          "constrained output)"))
    return error;
  for (const char *field : {"presence_penalty", "frequency_penalty"})
    if (llvm::Error error = refuseUnless(body, field, isZero,
                                         "penalties are not applied (only 0)"))
      return error;
  if (llvm::Error error = refuseUnless(
          body, "repetition_penalty",
          [](const json &value) { return value.is_number() && value == 1; },
          "penalties are not applied (only 1)"))
    return error;
  if (llvm::Error error =
          refuseUnless(body, "min_p", isZero, "only 0 (no min-p cut)"))
    return error;
  if (llvm::Error error = refuseUnless(
          body, "modalities",
          [](const json &value) { return value == json::array({"text"}); },
          "only [\"text\"]"))
    return error;
  for (const char *field : {"audio", "prediction"})
    if (llvm::Error error = refuseUnless(
            body, field, [](const json &) { return false; }, "text only"))
      return error;
  if (!chat) {
    if (llvm::Error error = refuseUnless(body, "echo", isFalse,
                                         "the prompt is not echoed (only "
                                         "false)"))
      return error;
    if (llvm::Error error = refuseUnless(
            body, "suffix",
            [](const json &value) {
              return value.is_string() &&
                     value.get_ref<const std::string &>().empty();
            },
            "no insertion (only an empty suffix)"))
      return error;
    if (llvm::Error error = refuseUnless(
            body, "best_of",
            [n](const json &value) {
              return value.is_number_integer() && value == n;
            },
            "choices are not ranked (only best_of = n)"))
      return error;
  }
  return llvm::Error::success();
}

/// logit_bias: {"TOKEN_ID": BIAS}, as OpenAI takes it.
llvm::Error readLogitBias(const json &body, CompletionRequest &request,
                          const RequestLimits &limits) {
  auto found = body.find("logit_bias");
  if (found == body.end() || found->is_null())
    return llvm::Error::success();
  if (!found->is_object())
    return badField("logit_bias", "must be an object of token ids to biases");
  if (found->size() > limits.maxLogitBias)
    return badField("logit_bias", "holds more than " +
                                      std::to_string(limits.maxLogitBias) +
                                      " tokens");
  for (auto entry = found->begin(); entry != found->end(); ++entry) {
    const std::string &key = entry.key();
    uint64_t token = 0;
    if (llvm::StringRef(key).getAsInteger(10, token) ||
        (limits.vocabSize > 0 && token >= uint64_t(limits.vocabSize)) ||
        token > uint64_t(INT32_MAX))
      return badField(
          "logit_bias",
          "has the key '" + llvm::StringRef(key).take_front(40).str() +
              "', not a token id" +
              (limits.vocabSize > 0
                   ? " (0 to " + std::to_string(limits.vocabSize - 1) + ")"
                   : std::string()));
    if (!entry.value().is_number())
      return badField("logit_bias", "must map token ids to numbers");
    double bias = entry.value().get<double>();
    if (!(bias >= -100 && bias <= 100))
      return badField("logit_bias", "biases must be in [-100, 100], not " +
                                        entry.value().dump() + " (token " +
                                        key + ")");
    request.logitBias.emplace_back(int32_t(token), float(bias));
  }
  return llvm::Error::success();
}

/// Chat: logprobs (bool) and top_logprobs; completions: logprobs (count).
llvm::Error readLogprobs(const json &body, CompletionRequest &request,
                         const RequestLimits &limits) {
  std::optional<int64_t> top;
  if (request.endpoint == Endpoint::ChatCompletions) {
    bool wanted = false;
    if (llvm::Error error = readBool(body, "logprobs", "logprobs", wanted))
      return error;
    if (llvm::Error error =
            readInteger(body, "top_logprobs", 0, limits.maxTopLogprobs, top))
      return error;
    if (top && *top > 0 && !wanted)
      return badField("top_logprobs", "needs 'logprobs': true");
    if (wanted)
      request.logprobs = top.value_or(0);
  } else {
    if (llvm::Error error =
            readInteger(body, "logprobs", 0, limits.maxTopLogprobs, top))
      return error;
    request.logprobs = top;
  }
  return llvm::Error::success();
}

/// reasoning_effort: read so that a malformed one is named, then ignored
/// (CompletionRequest.h says why).
llvm::Error readReasoningEffort(const json &body) {
  auto found = body.find("reasoning_effort");
  if (found == body.end() || found->is_null())
    return llvm::Error::success();
  static const char *const efforts[] = {"none",   "minimal", "low",
                                        "medium", "high",    "xhigh"};
  if (found->is_string())
    for (const char *effort : efforts)
      if (found->get_ref<const std::string &>() == effort)
        return llvm::Error::success();
  return badField("reasoning_effort",
                  "must be none, minimal, low, medium, high or xhigh, not " +
                      found->dump() +
                      " (it is accepted and ignored: the model served has "
                      "no reasoning mode)");
}

} // namespace

llvm::Expected<CompletionRequest>
parseCompletionRequest(llvm::StringRef text, Endpoint endpoint,
                       const RequestLimits &limits) {
  // Checked before the document is built (support/JsonDepth.h).
  if (std::optional<size_t> tooDeep = support::findJsonDepthExcess(text))
    return apiError(400, "the body is not valid JSON: nested deeper than " +
                             std::to_string(support::kMaxJsonDepth) +
                             " levels at " +
                             support::jsonLineAndColumn(text, *tooDeep));
  json body;
  try {
    body = json::parse(text.begin(), text.end());
  } catch (const json::parse_error &error) {
    // nlohmann's message names the line and column.
    return apiError(400,
                    std::string("the body is not valid JSON: ") + error.what());
  }
  if (!body.is_object())
    return apiError(400, "the body must be a JSON object");

  CompletionRequest request;
  request.endpoint = endpoint;
  request.model = limits.models.primary();
  if (auto model = body.find("model");
      model != body.end() && !model->is_null()) {
    if (!model->is_string())
      return badField("model", "must be a string");
    const std::string *served =
        limits.models.match(model->get_ref<const std::string &>());
    if (!served)
      return apiError(404,
                      "The model '" + model->get<std::string>() +
                          "' does not exist; this server serves " +
                          limits.models.describe() +
                          " (names match in any case, with or without "
                          ".gguf; --served-model-name adds others)",
                      "model");
    request.model = *served;
  }
  if (llvm::Error error = endpoint == Endpoint::ChatCompletions
                              ? readMessages(body, request)
                              : readPrompts(body, request, limits))
    return error;

  // OpenAI's newer name wins, as vLLM reads `max_completion_tokens or
  // max_tokens`; both are checked, so a wrong one is never carried along
  // unseen. The completions endpoint takes it too: it bounds the same
  // tokens there, and ignoring it would run to the default instead.
  std::optional<int64_t> maxTokens, maxCompletionTokens;
  if (llvm::Error error =
          readInteger(body, "max_tokens", 1, limits.maxTokensLimit, maxTokens))
    return error;
  if (llvm::Error error =
          readInteger(body, "max_completion_tokens", 1, limits.maxTokensLimit,
                      maxCompletionTokens))
    return error;
  if (maxCompletionTokens) {
    maxTokens = maxCompletionTokens;
    request.maxTokensField = "max_completion_tokens";
  }
  request.maxTokens = maxTokens.value_or(
      std::min(limits.defaultMaxTokens, limits.maxTokensLimit));
  if (llvm::Error error = readReasoningEffort(body))
    return error;
  if (llvm::Error error =
          readNumber(body, "temperature", 0.0, 2.0, request.temperature))
    return error;
  if (llvm::Error error = readNumber(body, "top_p", 0.0, 1.0, request.topP))
    return error;
  if (request.topP <= 0)
    return badField("top_p", "must be greater than 0");
  std::optional<int64_t> seed;
  if (llvm::Error error = readInteger(body, "seed", INT64_MIN, INT64_MAX, seed))
    return error;
  if (seed)
    request.seed = uint64_t(*seed);
  std::optional<int64_t> n;
  if (llvm::Error error = readInteger(body, "n", 1, limits.maxChoices, n))
    return error;
  request.n = n.value_or(1);
  if (llvm::Error error = readStop(body, request, limits))
    return error;
  if (llvm::Error error = readBool(body, "stream", "stream", request.stream))
    return error;
  if (auto options = body.find("stream_options");
      options != body.end() && !options->is_null()) {
    if (!options->is_object())
      return badField("stream_options", "must be an object");
    if (llvm::Error error =
            readBool(*options, "include_usage", "stream_options.include_usage",
                     request.includeUsage))
      return error;
  }
  // vLLM's extension; -1 (vLLM's "none") or 0: no limit.
  std::optional<int64_t> topK;
  if (llvm::Error error = readInteger(body, "top_k", -1, INT32_MAX, topK))
    return error;
  request.topK = std::max<int64_t>(0, topK.value_or(0));
  if (llvm::Error error = refuseUnsupported(body, endpoint, request.n))
    return error;
  if (llvm::Error error = readLogitBias(body, request, limits))
    return error;
  if (llvm::Error error = readLogprobs(body, request, limits))
    return error;
  // Each token's figures go out with the whole answer only.
  if (request.logprobs && request.stream)
    return badField("logprobs", "is not supported with stream: true (ask "
                                "for the whole answer)");
  return request;
}

} // namespace spanc::server
