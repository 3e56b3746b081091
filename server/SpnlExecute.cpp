//===- SpnlExecute.cpp - spnl's /v1/query/execute: its request and answers ===//

#include "server/SpnlExecute.h"

#include "server/ApiError.h"
#include "support/JsonDepth.h"

#include <nlohmann/json.hpp>

namespace spanc::server {

namespace {

using nlohmann::json;

json reason(const char *finishReason) {
  return finishReason ? json(finishReason) : json();
}

bool isMapKey(const std::string &key) { return key == "map" || key == "Map"; }

} // namespace

llvm::Expected<bool> parseStreamParam(bool present, llvm::StringRef value) {
  if (!present || value == "false")
    return false;
  if (value == "true")
    return true;
  return apiError(400, "stream takes true or false, got '" + value.str() + "'",
                  "stream");
}

bool readsAsCompletion(llvm::StringRef body) {
  // Compiled already, so within the limit; never build a deeper one.
  if (support::findJsonDepthExcess(body))
    return false;
  json document = json::parse(body.begin(), body.end(), nullptr,
                              /*allow_exceptions=*/false);
  if (!document.is_object() || document.size() != 1)
    return false;
  const std::string &key = document.begin().key();
  if (isMapKey(key))
    return true;
  const json &inner = document.begin().value();
  return key == "bulk" && inner.is_object() && inner.size() == 1 &&
         isMapKey(inner.begin().key());
}

std::vector<plan::CallId> spnlChoices(const plan::Plan &plan) {
  std::vector<plan::CallId> choices;
  for (const plan::QueryPlan &query : plan.queries)
    for (const plan::ResultItem &item : query.results)
      if (item.call)
        choices.push_back(*item.call);
  return choices;
}

std::string spnlChunk(const SpnlAnswer &answer, size_t choice,
                      llvm::StringRef text, const char *finishReason) {
  json delta = json::object();
  if (!finishReason)
    delta = {{"role", "assistant"}, {"content", text.str()}};
  json item = {{"index", choice},
               {"text", text.str()},
               {"delta", delta},
               {"logprobs", nullptr},
               {"finish_reason", reason(finishReason)}};
  return dumpJson({{"id", answer.id},
                   {"object", "text_completion"},
                   {"created", answer.created},
                   {"model", answer.model},
                   {"choices", json::array({item})}});
}

std::string spnlWholeAnswer(const SpnlAnswer &answer, bool asCompletion,
                            llvm::ArrayRef<std::string> texts,
                            llvm::ArrayRef<const char *> finishReasons,
                            const TokenUsage &usage) {
  json choices = json::array();
  for (size_t index = 0; index < texts.size(); ++index) {
    json item = {{"index", index},
                 {"logprobs", nullptr},
                 {"finish_reason", reason(finishReasons[index])}};
    if (asCompletion)
      item["text"] = texts[index];
    else
      item["message"] = {{"role", "assistant"}, {"content", texts[index]}};
    choices.push_back(item);
  }
  return dumpJson(
      {{"id", answer.id},
       {"object", asCompletion ? "text_completion" : "chat.completion"},
       {"created", answer.created},
       {"model", answer.model},
       {"choices", choices},
       {"usage", usageJson(usage)}});
}

} // namespace spanc::server
