//===- ChatTemplate.cpp - Per-message chat formatting as token ids --------===//

#include "runtime/model/ChatTemplate.h"

#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/Twine.h"

using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace spanc::model {

namespace {

Error templateError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

void append(std::vector<int32_t> &out, const std::vector<int32_t> &ids) {
  out.insert(out.end(), ids.begin(), ids.end());
}

/// The system prompt a ChatML template writes itself when the first
/// message is not a system message: the literal after
/// "<|im_start|>system\n" up to "<|im_end|>" in the template text.
std::optional<std::string> findDefaultSystemPrompt(StringRef text) {
  StringRef marker = "<|im_start|>system\\n";
  size_t start = text.find(marker);
  StringRef escapedNewline = "\\n";
  if (start == StringRef::npos) {
    marker = "<|im_start|>system\n";
    start = text.find(marker);
    escapedNewline = "";
  }
  if (start == StringRef::npos)
    return std::nullopt;
  StringRef rest = text.substr(start + marker.size());
  size_t end = rest.find("<|im_end|>");
  if (end == StringRef::npos)
    return std::nullopt;
  StringRef prompt = rest.substr(0, end);
  // A template that writes messages[0]['content'] here has no default.
  if (prompt.contains("{{") || prompt.contains("{%") || prompt.contains("'") ||
      prompt.contains("\"") || prompt.empty())
    return std::nullopt;
  return prompt.str();
}

} // namespace

const char *chatTemplateKindName(ChatTemplateKind kind) {
  switch (kind) {
  case ChatTemplateKind::ChatML:
    return "chatml";
  case ChatTemplateKind::Llama3:
    return "llama3";
  case ChatTemplateKind::Llama2:
    return "llama2";
  }
  return "unknown";
}

std::optional<ChatTemplateKind> ChatTemplate::detectKind(StringRef text) {
  if (text.contains("<|im_start|>"))
    return ChatTemplateKind::ChatML;
  if (text.contains("<|start_header_id|>") && text.contains("<|eot_id|>"))
    return ChatTemplateKind::Llama3;
  if (text.contains("[INST]") && text.contains("[/INST]"))
    return ChatTemplateKind::Llama2;
  return std::nullopt;
}

Expected<ChatTemplate> ChatTemplate::fromGguf(const GgufFile &file,
                                              const Tokenizer &tokenizer) {
  Expected<StringRef> text = file.getString("tokenizer.chat_template");
  if (!text)
    return text.takeError();
  std::optional<ChatTemplateKind> kind = detectKind(*text);
  if (!kind)
    return templateError(Twine(file.name()) +
                         ": tokenizer.chat_template is not a known family "
                         "(ChatML, Llama 3, Llama 2)");
  Expected<ChatTemplate> result = create(*kind, tokenizer);
  if (!result)
    return result.takeError();
  if (*kind == ChatTemplateKind::ChatML)
    result->defaultSystem = findDefaultSystemPrompt(*text);
  return result;
}

Expected<ChatTemplate> ChatTemplate::create(ChatTemplateKind kind,
                                            const Tokenizer &tokenizer) {
  ChatTemplate result(kind, tokenizer);
  auto need = [&](StringRef name, int32_t &id) -> Error {
    std::optional<int32_t> found = tokenizer.findToken(name);
    if (!found)
      return templateError(Twine(chatTemplateKindName(kind)) +
                           " chat template needs token '" + name +
                           "', which the vocabulary lacks");
    id = *found;
    return Error::success();
  };
  switch (kind) {
  case ChatTemplateKind::ChatML:
    if (Error error = need("<|im_start|>", result.beginId))
      return error;
    if (Error error = need("<|im_end|>", result.endId))
      return error;
    break;
  case ChatTemplateKind::Llama3:
    if (Error error = need("<|start_header_id|>", result.headerStartId))
      return error;
    if (Error error = need("<|end_header_id|>", result.headerEndId))
      return error;
    if (Error error = need("<|eot_id|>", result.endId))
      return error;
    if (Error error = need("<|begin_of_text|>", result.bosId))
      return error;
    break;
  case ChatTemplateKind::Llama2:
    result.bosId = tokenizer.bosId();
    result.endId = tokenizer.eosId();
    if (result.bosId < 0 || result.endId < 0)
      return templateError("llama2 chat template needs BOS and EOS tokens");
    break;
  }
  return result;
}

Expected<std::vector<int32_t>>
ChatTemplate::encodeMessage(StringRef role, StringRef content) const {
  std::vector<int32_t> ids;
  switch (templateKind) {
  case ChatTemplateKind::ChatML:
    // Between the markers, "ROLE\nCONTENT" is one text fragment, exactly
    // as llama.cpp splits the rendered prompt, so the ids match it.
    ids.push_back(beginId);
    append(ids, tokenizer->encode((role + "\n" + content).str(), false));
    ids.push_back(endId);
    append(ids, tokenizer->encode("\n", false));
    return ids;
  case ChatTemplateKind::Llama3:
    // The official template trims the content.
    ids.push_back(headerStartId);
    append(ids, tokenizer->encode(role, false));
    ids.push_back(headerEndId);
    append(ids, tokenizer->encode(("\n\n" + content.trim()).str(), false));
    ids.push_back(endId);
    return ids;
  case ChatTemplateKind::Llama2:
    if (role == "system") {
      ids.push_back(bosId);
      append(ids, tokenizer->encode(("[INST] <<SYS>>\n" + content.trim() +
                                     "\n<</SYS>> [/INST]")
                                        .str(),
                                    false));
      return ids;
    }
    if (role == "user") {
      ids.push_back(bosId);
      append(ids, tokenizer->encode(
                      ("[INST] " + content.trim() + " [/INST]").str(), false));
      return ids;
    }
    if (role == "assistant") {
      append(ids, tokenizer->encode((content.trim() + " ").str(), false));
      ids.push_back(endId);
      return ids;
    }
    return templateError("llama2 chat template has no role '" + role +
                         "' (system, user, assistant)");
  }
  return ids;
}

std::vector<int32_t> ChatTemplate::assistantHeader() const {
  std::vector<int32_t> ids;
  switch (templateKind) {
  case ChatTemplateKind::ChatML:
    ids.push_back(beginId);
    append(ids, tokenizer->encode("assistant\n", false));
    break;
  case ChatTemplateKind::Llama3:
    ids.push_back(headerStartId);
    append(ids, tokenizer->encode("assistant", false));
    ids.push_back(headerEndId);
    append(ids, tokenizer->encode("\n\n", false));
    break;
  case ChatTemplateKind::Llama2:
    break; // the assistant answers right after a user turn's [/INST]
  }
  return ids;
}

std::vector<int32_t> ChatTemplate::endOfTurnTokens() const {
  std::vector<int32_t> ids = {endId};
  if (templateKind == ChatTemplateKind::ChatML)
    append(ids, tokenizer->encode("\n", false));
  return ids;
}

std::vector<int32_t> ChatTemplate::stopTokens() const {
  std::vector<int32_t> ids = {endId};
  for (int32_t id : tokenizer->endOfGenerationIds())
    if (id != endId)
      ids.push_back(id);
  return ids;
}

std::vector<int32_t> ChatTemplate::sequencePrefix() const {
  if (templateKind == ChatTemplateKind::Llama3)
    return {bosId};
  if (templateKind == ChatTemplateKind::ChatML &&
      tokenizer->addBosByDefault() && tokenizer->bosId() >= 0)
    return {tokenizer->bosId()};
  return {}; // Llama 2 messages carry their own <s>
}

} // namespace spanc::model
