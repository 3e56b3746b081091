//===- GenerateCommand.cpp - spanc generate -------------------------------===//
//
// Prompt in, streamed text out: tokenizes PROMPT (or wraps it as a user
// message of the model's chat template with --chat), prefills it, samples up
// to --max-tokens tokens and writes each one's text to stdout as soon as it
// exists (with -o FILE, to FILE at the end, whole). Time to first token and
// decode tokens/s go to stderr. SIGINT/SIGTERM stop between two prefill
// chunks or two tokens (Interrupt.h).
//
//===----------------------------------------------------------------------===//

#include "tools/spanc/CommandLine.h"
#include "tools/spanc/DeviceOption.h"
#include "tools/spanc/Interrupt.h"
#include "tools/spanc/IsaOption.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/ThreadsOption.h"

#include "runtime/backend/BackendFactory.h"
#include "runtime/kernels/cpu/AdaptiveThreads.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/SequenceRunner.h"
#include "runtime/model/Model.h"
#include "runtime/model/Sampler.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <chrono>
#include <sstream>

namespace spanc::cli {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

int runGenerate(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                   //
      ("input", po::value<std::string>()->required(), "the prompt")       //
      ("model,m", po::value<std::string>()->required(), "GGUF model")     //
      ("max-tokens,n", po::value<int>()->default_value(128),              //
       "tokens to generate at most (0: none); the prompt and these must " //
       "fit the model's context")                                         //
      ("temperature", po::value<float>()->default_value(0.0f),            //
       "sampling temperature in [0, 2] (0: greedy)")                      //
      ("top-k", po::value<int>()->default_value(0), "top-k (0: off)")     //
      ("top-p", po::value<float>()->default_value(1.0f),                  //
       "top-p in (0, 1] (1: off)")                                        //
      ("seed", po::value<uint64_t>()->default_value(0), "sampling seed")  //
      ("fixed-threads", "always use --threads threads, even while other " //
                        "processes take cores (benchmarks)")              //
      ("chat", "wrap the prompt as a user message of the chat template")  //
      ("output,o", po::value<std::string>(),                              //
       "write the completion to this file once it is complete (through "  //
       "a temporary file, so an interrupted run leaves it as it was) "    //
       "instead of streaming it to stdout")                               //
      ("f32", "force f32 GEMMs (debugging)")                              //
      ("numerics", po::value<std::string>()->default_value("default"),    //
       "default, or llama: llama.cpp's CPU arithmetic bit for bit (Q4_1/" //
       "Q8_0 models, AVX-512; slower prefill)");
  addThreadsOption(options);
  addIsaOption(options);
  addDeviceOption(options);
  po::positional_options_description positional;
  positional.add("input", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "generate", "spanc generate PROMPT --model FILE [options]",
      ("Streams a completion of PROMPT on a model, with TTFT and tokens/s "
       "on stderr. SIGINT or SIGTERM stops between two tokens: the text so "
       "far ends with a newline, -o FILE is left as it was, and the exit "
       "code is 130 or 143. -t is a ceiling: fewer threads run while other "
       "processes take cores, unless --fixed-threads.\n\n" +
       limitsHelp(PromptLimit | ThreadsLimit))
          .c_str(),
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  deferInterrupts();
  const po::variables_map &values = parsed.values;
  const int maxTokens = values["max-tokens"].as<int>();
  if (maxTokens < 0)
    return reportError("generate", "--max-tokens must be >= 0");
  model::SamplingParams sampling;
  sampling.temperature = values["temperature"].as<float>();
  sampling.topK = values["top-k"].as<int>();
  sampling.topP = values["top-p"].as<float>();
  sampling.seed = values["seed"].as<uint64_t>();
  // The ranges of a gen's options (ir/IR.cpp); written so that NaN fails.
  auto shown = [](float value) {
    std::ostringstream text;
    text << value;
    return text.str();
  };
  if (!(sampling.temperature >= 0 && sampling.temperature <= 2))
    return reportError("generate", "--temperature " +
                                       shown(sampling.temperature) +
                                       ": must be in [0, 2]");
  if (!(sampling.topP > 0 && sampling.topP <= 1))
    return reportError("generate", "--top-p " + shown(sampling.topP) +
                                       ": must be in (0, 1]");
  if (sampling.topK < 0)
    return reportError("generate", "--top-k " + std::to_string(sampling.topK) +
                                       ": must not be negative");
  if (!applyIsaOption("generate", values))
    return 1;
  if (!applyThreadsOption("generate", values))
    return 1;

  std::optional<backend::Device> device = readDeviceOption("generate", values);
  if (!device)
    return 1;
  model::ModelOptions modelOptions;
  modelOptions.forceF32 = values.count("f32") > 0;
  // The CUDA backend uploads the file's tensors itself.
  modelOptions.hostWeights = *device == backend::Device::Cpu;
  std::optional<model::Numerics> numerics =
      model::parseNumerics(values["numerics"].as<std::string>());
  if (!numerics)
    return reportError("generate", "--numerics must be default or llama");
  modelOptions.numerics = *numerics;
  auto loaded =
      model::Model::load(values["model"].as<std::string>(), modelOptions);
  if (!loaded)
    return reportError("generate", llvm::toString(loaded.takeError()));
  model::Model &engineModel = **loaded;
  auto tokenizer = model::Tokenizer::fromGguf(engineModel.file());
  if (!tokenizer)
    return reportError("generate", llvm::toString(tokenizer.takeError()));

  const std::string prompt = values["input"].as<std::string>();
  std::vector<int32_t> promptTokens;
  std::vector<int32_t> stopTokens;
  if (values.count("chat")) {
    auto chat = model::ChatTemplate::fromGguf(engineModel.file(), **tokenizer);
    if (!chat)
      return reportError("generate", llvm::toString(chat.takeError()));
    promptTokens = chat->sequencePrefix();
    auto append = [&](llvm::StringRef role,
                      llvm::StringRef content) -> llvm::Error {
      auto ids = chat->encodeMessage(role, content);
      if (!ids)
        return ids.takeError();
      promptTokens.insert(promptTokens.end(), ids->begin(), ids->end());
      return llvm::Error::success();
    };
    if (chat->defaultSystemPrompt())
      if (llvm::Error error = append("system", *chat->defaultSystemPrompt()))
        return reportError("generate", llvm::toString(std::move(error)));
    if (llvm::Error error = append("user", prompt))
      return reportError("generate", llvm::toString(std::move(error)));
    std::vector<int32_t> header = chat->assistantHeader();
    promptTokens.insert(promptTokens.end(), header.begin(), header.end());
    stopTokens = chat->stopTokens();
  } else {
    if ((*tokenizer)->addBosByDefault() && (*tokenizer)->bosId() >= 0)
      promptTokens.push_back((*tokenizer)->bosId());
    std::vector<int32_t> ids = (*tokenizer)->encode(prompt, true);
    promptTokens.insert(promptTokens.end(), ids.begin(), ids.end());
  }
  if (promptTokens.empty())
    return reportError("generate", "the prompt has no tokens");
  // The prompt and every token generated take a position of the model's
  // context, as they do for a call of 'spanc run'.
  const int64_t context = engineModel.config().contextLength;
  if (int64_t(promptTokens.size()) + maxTokens > context)
    return reportError(
        "generate",
        "the prompt (" + std::to_string(promptTokens.size()) +
            " tokens) and --max-tokens " + std::to_string(maxTokens) +
            " exceed the model's context of " + std::to_string(context) +
            " tokens" +
            (int64_t(promptTokens.size()) < context
                 ? " (at most " +
                       std::to_string(context - int64_t(promptTokens.size())) +
                       " tokens can be generated after this prompt)"
                 : ""));
  auto isStop = [&](int32_t id) {
    return (*tokenizer)->isEndOfGeneration(id) ||
           std::find(stopTokens.begin(), stopTokens.end(), id) !=
               stopTokens.end();
  };

  // After omp_set_num_threads: --threads is its ceiling.
  cpu::AdaptiveThreads adaptiveThreads;
  const bool adaptThreads = values.count("fixed-threads") == 0;
  const int64_t sequenceTokens = int64_t(promptTokens.size()) + maxTokens;
  constexpr int kBlockSize = 16;
  std::unique_ptr<backend::Backend> deviceBackend;
  model::SequenceRunner::ForwardFunction deviceForward;
  if (*device != backend::Device::Cpu) {
    // The sequence's blocks 0, 1, ... in the device's pool, K stored
    // rotated as the CPU runner stores it.
    backend::BackendOptions backendOptions;
    backendOptions.device = *device;
    backendOptions.numBlocks =
        std::max<int64_t>(1, (sequenceTokens + kBlockSize - 1) / kBlockSize);
    backendOptions.blockSize = kBlockSize;
    backendOptions.keysRotated = true;
    auto made = backend::createBackend(engineModel, backendOptions);
    if (!made)
      return reportError("generate", llvm::toString(made.takeError()));
    deviceBackend = std::move(*made);
    deviceForward = [&](llvm::ArrayRef<model::ForwardSequence> batch,
                        model::ForwardOutput &out) {
      return deviceBackend->forward(batch, out);
    };
  }
  auto runner = model::SequenceRunner::create(engineModel, sequenceTokens,
                                              kBlockSize, deviceForward);
  if (!runner)
    return reportError("generate", llvm::toString(runner.takeError()));
  model::Sampler sampler(sampling);
  const bool toFile = values.count("output") != 0;
  if (toFile) {
    // Found out before generating, not after.
    llvm::StringRef folder =
        llvm::sys::path::parent_path(values["output"].as<std::string>());
    if (!folder.empty() && !llvm::sys::fs::is_directory(folder))
      return reportError("generate", "cannot write '" +
                                         values["output"].as<std::string>() +
                                         "': no folder '" + folder.str() + "'");
  }
  std::string completion;
  llvm::raw_string_ostream completionStream(completion);
  llvm::raw_ostream &out =
      toFile ? static_cast<llvm::raw_ostream &>(completionStream)
             : llvm::outs();
  auto start = std::chrono::steady_clock::now();
  // The runner's own prefill chunks, one call each, so that an interrupt
  // is seen between them (the same chunks: the same logits).
  constexpr size_t kPrefillChunk = 512;
  llvm::Expected<llvm::ArrayRef<float>> logits = llvm::ArrayRef<float>();
  for (size_t begin = 0; begin < promptTokens.size(); begin += kPrefillChunk) {
    if (interruptRequested())
      return reportInterrupted("generate", "stopped during the prefill");
    logits = (*runner)->append(
        llvm::ArrayRef<int32_t>(promptTokens)
            .slice(begin,
                   std::min(kPrefillChunk, promptTokens.size() - begin)));
    if (!logits)
      return reportError("generate", llvm::toString(logits.takeError()));
    if (adaptThreads)
      adaptiveThreads.afterStep();
  }
  // TTFT: prompt in to first token chosen. Decode rate: the steps that
  // produced the tokens after the first one.
  double timeToFirstToken = 0;
  auto decodeStart = std::chrono::steady_clock::now();
  int emitted = 0;
  while (emitted < maxTokens && !interruptRequested()) {
    int32_t next = sampler.sample(*logits);
    if (emitted == 0) {
      timeToFirstToken = secondsSince(start);
      decodeStart = std::chrono::steady_clock::now();
    }
    if (isStop(next))
      break;
    out << (*tokenizer)->tokenToPiece(next, /*renderSpecial=*/false);
    out.flush();
    if (++emitted == maxTokens)
      break;
    logits = (*runner)->append(llvm::ArrayRef<int32_t>(next));
    if (!logits)
      return reportError("generate", llvm::toString(logits.takeError()));
    if (adaptThreads)
      adaptiveThreads.afterStep();
  }
  out << "\n";
  out.flush();
  double decodeSeconds = secondsSince(decodeStart);
  if (interruptRequested())
    return reportInterrupted(
        "generate", "stopped after " + std::to_string(emitted) + " tokens" +
                        (toFile ? "; '" + values["output"].as<std::string>() +
                                      "' is as it was"
                                : ""));
  if (toFile)
    if (int code = writeFileAtomically(
            "generate", values["output"].as<std::string>(), completion))
      return code;
  int decodeSteps = std::max(0, emitted - 1);
  llvm::errs() << llvm::format(
      "spanc generate: %zu prompt tokens, TTFT %.1f ms; %d tokens, decode "
      "%.1f tok/s; %s GEMMs, %d threads",
      promptTokens.size(), timeToFirstToken * 1e3, emitted,
      decodeSteps > 0 ? decodeSteps / std::max(decodeSeconds, 1e-9) : 0.0,
      cpu::gemmPrecisionName(engineModel.gemmPrecision()),
      adaptiveThreads.maxThreads());
  if (adaptiveThreads.shrinks() > 0)
    llvm::errs() << llvm::format(
        " (%d at the end: fewer %u time(s) while other processes took cores)",
        adaptiveThreads.threads(), adaptiveThreads.shrinks());
  llvm::errs() << "\n";
  return 0;
}

} // namespace spanc::cli
