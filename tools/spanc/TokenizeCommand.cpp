//===- TokenizeCommand.cpp - spanc tokenize -------------------------------===//
//
// Prints the token ids and pieces of a text under a GGUF model's
// vocabulary: one "ID 'PIECE'" line per token, or with --ids the id list in
// llama-tokenize's "[1, 2, 3]" form for comparing against the peer.
//
//===----------------------------------------------------------------------===//

#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

namespace {

/// The piece with control characters and quotes escaped, so a line per
/// token stays one line.
std::string printable(llvm::StringRef piece) {
  std::string out;
  for (unsigned char c : piece) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\'' || c == '\\')
      (out += '\\') += static_cast<char>(c);
    else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else
      out += static_cast<char>(c);
  }
  return out;
}

} // namespace

int runTokenize(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                       //
      ("input", po::value<std::string>(), "text to tokenize") //
      ("model,m",                                             //
       po::value<std::string>()->default_value(
           "models/SmolLM2-135M-Instruct.Q4_1.gguf"),                      //
       "GGUF model whose tokenizer to use")                                //
      ("file,f", po::value<std::string>(), "read the text from this file") //
      ("ids", "print only the ids, as [1, 2, 3]")                          //
      ("no-parse-special",                                                 //
       "treat control tokens written in the text (<|im_start|>) as text")  //
      ("add-bos", "prepend BOS when the model asks for it");
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "tokenize", "spanc tokenize TEXT [--model M] [--ids]",
      "Prints the token ids and pieces of TEXT under a model vocabulary.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  std::string text;
  if (values.count("file")) {
    auto buffer = llvm::MemoryBuffer::getFile(values["file"].as<std::string>());
    if (!buffer)
      return reportError("tokenize", values["file"].as<std::string>() + ": " +
                                         buffer.getError().message());
    text = (*buffer)->getBuffer().str();
  } else if (values.count("input")) {
    text = values["input"].as<std::string>();
  } else {
    return reportError("tokenize", "give TEXT or --file FILE");
  }

  auto file = model::GgufFile::open(values["model"].as<std::string>());
  if (!file)
    return reportError("tokenize", llvm::toString(file.takeError()));
  auto tokenizer = model::Tokenizer::fromGguf(**file);
  if (!tokenizer)
    return reportError("tokenize", llvm::toString(tokenizer.takeError()));

  std::vector<int32_t> ids;
  if (values.count("add-bos") && (*tokenizer)->addBosByDefault())
    ids.push_back((*tokenizer)->bosId());
  std::vector<int32_t> encoded =
      (*tokenizer)->encode(text, !values.count("no-parse-special"));
  ids.insert(ids.end(), encoded.begin(), encoded.end());

  llvm::raw_ostream &out = llvm::outs();
  if (values.count("ids")) {
    out << '[';
    for (size_t i = 0; i < ids.size(); ++i)
      out << (i ? ", " : "") << ids[i];
    out << "]\n";
    return 0;
  }
  for (int32_t id : ids)
    out << id << " '" << printable((*tokenizer)->tokenToPiece(id)) << "'\n";
  return 0;
}

} // namespace spanc::cli
