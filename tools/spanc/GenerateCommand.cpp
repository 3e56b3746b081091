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
#include "runtime/backend/SequenceRunner.h"
#include "runtime/kernels/cpu/AdaptiveThreads.h"
#include "runtime/model/ChatTemplate.h"
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

/// --temperature, --top-k, --top-p and --seed, in the ranges of a gen's
/// options (ir/IR.cpp); nothing (reported) when one is outside.
std::optional<model::SamplingParams>
readSampling(const po::variables_map &values) {
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
  if (!(sampling.temperature >= 0 && sampling.temperature <= 2)) {
    reportError("generate", "--temperature " + shown(sampling.temperature) +
                                ": must be in [0, 2]");
    return std::nullopt;
  }
  if (!(sampling.topP > 0 && sampling.topP <= 1)) {
    reportError("generate",
                "--top-p " + shown(sampling.topP) + ": must be in (0, 1]");
    return std::nullopt;
  }
  if (sampling.topK < 0) {
    reportError("generate", "--top-k " + std::to_string(sampling.topK) +
                                ": must not be negative");
    return std::nullopt;
  }
  return sampling;
}

/// A prompt's tokens, and the tokens besides end-of-generation that stop
/// it (the chat template's).
struct EncodedPrompt {
  std::vector<int32_t> tokens;
  std::vector<int32_t> stopTokens;
};

/// PROMPT as it is, or (--chat) as the chat template's user message after
/// its default system prompt, ready for the assistant's answer.
llvm::Expected<EncodedPrompt> encodePrompt(const po::variables_map &values,
                                           const model::Model &model,
                                           const model::Tokenizer &tokenizer) {
  const std::string prompt = values["input"].as<std::string>();
  EncodedPrompt encoded;
  std::vector<int32_t> &promptTokens = encoded.tokens;
  if (values.count("chat")) {
    auto chat = model::ChatTemplate::fromGguf(model.file(), tokenizer);
    if (!chat)
      return chat.takeError();
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
        return error;
    if (llvm::Error error = append("user", prompt))
      return error;
    std::vector<int32_t> header = chat->assistantHeader();
    promptTokens.insert(promptTokens.end(), header.begin(), header.end());
    encoded.stopTokens = chat->stopTokens();
  } else {
    if (tokenizer.addBosByDefault() && tokenizer.bosId() >= 0)
      promptTokens.push_back(tokenizer.bosId());
    std::vector<int32_t> ids = tokenizer.encode(prompt, true);
    promptTokens.insert(promptTokens.end(), ids.begin(), ids.end());
  }
  if (promptTokens.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the prompt has no tokens");
  return encoded;
}

/// Why a prompt of `promptTokens` and `maxTokens` more do not fit the
/// context, or nothing when they do: the prompt and every token generated
/// take a position of the model's context, as they do for a call of
/// 'spanc run'.
std::optional<std::string> contextExcess(size_t promptTokens, int maxTokens,
                                         int64_t context) {
  if (int64_t(promptTokens) + maxTokens <= context)
    return std::nullopt;
  return "the prompt (" + std::to_string(promptTokens) +
         " tokens) and --max-tokens " + std::to_string(maxTokens) +
         " exceed the model's context of " + std::to_string(context) +
         " tokens" +
         (int64_t(promptTokens) < context
              ? " (at most " + std::to_string(context - int64_t(promptTokens)) +
                    " tokens can be generated after this prompt)"
              : "");
}

/// A device's backend for one sequence: its blocks 0, 1, ... in the
/// device's pool, K stored rotated as the CPU runner stores it.
llvm::Expected<std::unique_ptr<backend::Backend>>
sequenceBackend(model::Model &model, backend::Device device,
                int64_t sequenceTokens, int blockSize) {
  backend::BackendOptions backendOptions;
  backendOptions.device = device;
  backendOptions.numBlocks =
      std::max<int64_t>(1, (sequenceTokens + blockSize - 1) / blockSize);
  backendOptions.blockSize = blockSize;
  backendOptions.keysRotated = true;
  return backend::createBackend(model, backendOptions);
}

/// spanc generate's own options (threads, ISA and device are added by
/// their shared helpers).
void addGenerateOptions(po::options_description &options) {
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
}

/// The line on stderr after the text: prompt, time to first token, decode
/// rate (the steps after the first token), GEMM precision and threads.
void reportSpeed(size_t promptTokens, double timeToFirstToken, int emitted,
                 double decodeSeconds, const model::Model &model,
                 const cpu::AdaptiveThreads &adaptiveThreads) {
  int decodeSteps = std::max(0, emitted - 1);
  llvm::errs() << llvm::format(
      "spanc generate: %zu prompt tokens, TTFT %.1f ms; %d tokens, decode "
      "%.1f tok/s; %s GEMMs, %d threads",
      promptTokens, timeToFirstToken * 1e3, emitted,
      decodeSteps > 0 ? decodeSteps / std::max(decodeSeconds, 1e-9) : 0.0,
      cpu::gemmPrecisionName(model.gemmPrecision()),
      adaptiveThreads.maxThreads());
  if (adaptiveThreads.shrinks() > 0)
    llvm::errs() << llvm::format(
        " (%d at the end: fewer %u time(s) while other processes took cores)",
        adaptiveThreads.threads(), adaptiveThreads.shrinks());
  llvm::errs() << "\n";
}

/// The model of --model, for `device`, with the GEMMs (--f32) and
/// numerics (--numerics) asked for.
llvm::Expected<std::unique_ptr<model::Model>>
loadModel(const po::variables_map &values, backend::Device device) {
  model::ModelOptions modelOptions;
  modelOptions.forceF32 = values.count("f32") > 0;
  // The CUDA backend uploads the file's tensors itself.
  modelOptions.hostWeights = device == backend::Device::Cpu;
  std::optional<model::Numerics> numerics =
      model::parseNumerics(values["numerics"].as<std::string>());
  if (!numerics)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--numerics must be default or llama");
  modelOptions.numerics = *numerics;
  return model::Model::load(values["model"].as<std::string>(), modelOptions);
}

/// Why `path` cannot be written (its folder is missing), or nothing.
std::optional<std::string> unwritable(const std::string &path) {
  llvm::StringRef folder = llvm::sys::path::parent_path(path);
  if (!folder.empty() && !llvm::sys::fs::is_directory(folder))
    return "cannot write '" + path + "': no folder '" + folder.str() + "'";
  return std::nullopt;
}

} // namespace

int runGenerate(const std::vector<std::string> &args) {
  po::options_description options("Options");
  addGenerateOptions(options);
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
  std::optional<model::SamplingParams> sampling = readSampling(values);
  if (!sampling)
    return 1;
  if (!applyIsaOption("generate", values))
    return 1;
  if (!applyThreadsOption("generate", values))
    return 1;

  std::optional<backend::Device> device = readDeviceOption("generate", values);
  if (!device)
    return 1;
  auto loaded = loadModel(values, *device);
  if (!loaded)
    return reportError("generate", llvm::toString(loaded.takeError()));
  model::Model &engineModel = **loaded;
  auto tokenizer = model::Tokenizer::fromGguf(engineModel.file());
  if (!tokenizer)
    return reportError("generate", llvm::toString(tokenizer.takeError()));

  auto prompt = encodePrompt(values, engineModel, **tokenizer);
  if (!prompt)
    return reportError("generate", llvm::toString(prompt.takeError()));
  const std::vector<int32_t> &promptTokens = prompt->tokens;
  const std::vector<int32_t> &stopTokens = prompt->stopTokens;
  if (std::optional<std::string> excess = contextExcess(
          promptTokens.size(), maxTokens, engineModel.config().contextLength))
    return reportError("generate", *excess);
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
  if (*device != backend::Device::Cpu) {
    auto made =
        sequenceBackend(engineModel, *device, sequenceTokens, kBlockSize);
    if (!made)
      return reportError("generate", llvm::toString(made.takeError()));
    deviceBackend = std::move(*made);
  }
  auto runner = backend::SequenceRunner::create(
      engineModel, sequenceTokens, kBlockSize, std::move(deviceBackend));
  if (!runner)
    return reportError("generate", llvm::toString(runner.takeError()));
  model::Sampler sampler(*sampling);
  const bool toFile = values.count("output") != 0;
  // Found out before generating, not after.
  if (toFile)
    if (std::optional<std::string> why =
            unwritable(values["output"].as<std::string>()))
      return reportError("generate", *why);
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
  reportSpeed(promptTokens.size(), timeToFirstToken, emitted, decodeSeconds,
              engineModel, adaptiveThreads);
  return 0;
}

} // namespace spanc::cli
