//===- ModelCommand.cpp - spanc model info --------------------------------===//
//
// `spanc model info FILE` prints what the engine reads from a GGUF model:
// architecture and sizes (ModelConfig), tensor types with counts and bytes,
// the tokenizer and the chat template detected; --metadata adds every
// metadata key (arrays summarised).
//
//===----------------------------------------------------------------------===//

#include "runtime/model/ChatTemplate.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Tokenizer.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace spanc::cli {

namespace {

using namespace spanc::model;

std::string describeValue(const GgufValue &value) {
  std::string text;
  llvm::raw_string_ostream out(text);
  if (auto string = value.asString()) {
    std::string shown = string->size() > 80
                            ? (string->take_front(77) + "...").str()
                            : string->str();
    out << '"';
    out.write_escaped(shown);
    out << '"';
  } else if (value.isArray()) {
    out << "array of " << value.arraySize() << ' '
        << ggufValueTypeName(value.elementType());
  } else if (auto flag = value.asBool()) {
    out << (*flag ? "true" : "false");
  } else if (auto number = value.asFloat()) {
    out << llvm::format("%g", *number);
  } else if (auto number = value.asSigned()) {
    out << *number;
  } else if (auto number = value.asUnsigned()) {
    out << *number;
  }
  return out.str();
}

std::string humanBytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / double(1ull << 20));
  else
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  return text;
}

} // namespace

int runModel(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                        //
      ("action", po::value<std::string>(), "what to do: info") //
      ("file", po::value<std::string>(), "GGUF model file")    //
      ("metadata", "also print every metadata key and value");
  po::positional_options_description positional;
  positional.add("action", 1).add("file", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "model", "spanc model info FILE [--metadata]",
      "Inspects a GGUF model: architecture, sizes, tensor types, tokenizer "
      "and the chat template detected.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;
  if (!values.count("action") || values["action"].as<std::string>() != "info")
    return reportError("model", "expected 'spanc model info FILE'");
  if (!values.count("file"))
    return reportError("model", "missing FILE (spanc model info FILE)");

  auto file = GgufFile::open(values["file"].as<std::string>());
  if (!file)
    return reportError("model", llvm::toString(file.takeError()));
  const GgufFile &gguf = **file;
  llvm::raw_ostream &out = llvm::outs();

  out << "file:          " << gguf.name() << " (" << humanBytes(gguf.fileSize())
      << ", GGUF v" << gguf.version() << ", " << gguf.metadata().size()
      << " keys, " << gguf.tensors().size() << " tensors, alignment "
      << gguf.alignment() << ")\n";

  auto config = ModelConfig::fromGguf(gguf);
  if (!config)
    return reportError("model", llvm::toString(config.takeError()));
  uint64_t parameters = 0;
  for (const GgufTensor &tensor : gguf.tensors())
    parameters += tensor.numElements();
  out << "architecture:  " << config->architecture << " ("
      << modelFamilyName(config->family) << " family)";
  if (!config->name.empty())
    out << ", name \"" << config->name << "\"";
  out << "\n";
  out << "parameters:    " << llvm::format("%.1f", parameters / 1e6) << "M\n";
  out << "layers:        " << config->numLayers << "\n";
  out << "embedding:     " << config->embeddingDim << "\n";
  out << "feed-forward:  " << config->feedForwardDim << "\n";
  out << "heads:         " << config->numHeads << " (kv heads "
      << config->numKvHeads << ", head dim " << config->headDim << ")\n";
  out << "vocabulary:    " << config->vocabSize << "\n";
  out << "context:       " << config->contextLength << "\n";
  out << "rope:          theta " << llvm::format("%g", config->ropeTheta)
      << ", " << ropeOrderName(config->ropeOrder) << " order, "
      << config->rotaryDim << " rotary dims, scaling "
      << ropeScalingName(config->ropeScaling);
  if (config->ropeScaling != RopeScalingType::None)
    out << " x" << llvm::format("%g", config->ropeScalingFactor)
        << " (original context " << config->ropeOriginalContext << ")";
  if (config->hasRopeFrequencyFactors)
    out << ", frequency factors";
  out << "\n";
  out << "rms epsilon:   " << llvm::format("%g", config->rmsEpsilon) << "\n";
  out << "output head:   "
      << (config->tiedOutput ? "tied to token_embd" : "separate") << "\n";
  out << "qkv bias:      " << (config->qkvBias ? "yes" : "no") << "\n";

  std::map<std::string, std::pair<unsigned, uint64_t>> types;
  for (const GgufTensor &tensor : gguf.tensors()) {
    auto &entry = types[ggmlTypeName(tensor.type)];
    ++entry.first;
    entry.second += tensor.numBytes;
  }
  out << "tensor types: ";
  bool first = true;
  for (const auto &[name, entry] : types) {
    out << (first ? " " : ", ") << name << " x" << entry.first << " ("
        << humanBytes(entry.second) << ")";
    first = false;
  }
  out << "\n";

  auto tokenizer = Tokenizer::fromGguf(gguf);
  if (!tokenizer) {
    out << "tokenizer:     unsupported: "
        << llvm::toString(tokenizer.takeError()) << "\n";
  } else {
    const Tokenizer &tokens = **tokenizer;
    out << "tokenizer:     "
        << (tokens.kind() == TokenizerKind::BytePairEncoding ? "byte-level BPE"
                                                             : "SentencePiece");
    if (!tokens.preTokenizer().empty())
      out << " (pre-tokenizer " << tokens.preTokenizer() << ")";
    out << ", " << tokens.vocabSize() << " tokens";
    auto describe = [&](const char *label, int32_t id) {
      if (id >= 0)
        out << ", " << label << " " << id << " '" << tokens.tokenText(id)
            << "'";
    };
    describe("bos", tokens.bosId());
    describe("eos", tokens.eosId());
    describe("eot", tokens.eotId());
    out << (tokens.addBosByDefault() ? ", adds bos" : ", no bos") << "\n";
    auto chat = ChatTemplate::fromGguf(gguf, tokens);
    if (!chat) {
      out << "chat template: none (" << llvm::toString(chat.takeError())
          << ")\n";
    } else {
      out << "chat template: " << chatTemplateKindName(chat->kind());
      if (chat->defaultSystemPrompt())
        out << " (template's default system prompt: \""
            << *chat->defaultSystemPrompt() << "\")";
      out << "\n";
    }
  }

  if (values.count("metadata")) {
    out << "metadata:\n";
    for (const GgufMetadataEntry &entry : gguf.metadata())
      out << "  " << entry.key << " = " << describeValue(entry.value) << "\n";
  }
  return 0;
}

} // namespace spanc::cli
