//===- ServeCommand.cpp - spanc serve: an OpenAI-compatible HTTP server ---===//
//
// Loads the model once, sizes one KV cache and starts the server library:
// the engine thread (one Executor session shared by every request) and the
// HTTP threads (docs/SERVING.md). SIGINT and SIGTERM stop
// it: the listening socket closes, requests in flight are cancelled (their
// clients get an error), the engine thread ends, exit 0.
//
//===----------------------------------------------------------------------===//

#include "retrieval/CorpusCatalog.h"
#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/AdaptiveThreads.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/model/ChatTemplate.h"
#include "runtime/model/ChatTemplateEncoder.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Model.h"
#include "runtime/model/ModelConfig.h"
#include "runtime/model/Tokenizer.h"
#include "runtime/sched/Executor.h"
#include "server/Engine.h"
#include "server/HttpServer.h"
#include "server/KvEventPublisher.h"
#include "server/Metrics.h"
#include "server/ModelNames.h"
#include "tools/spanc/CommandLine.h"
#include "tools/spanc/DeviceOption.h"
#include "tools/spanc/GemmOptions.h"
#include "tools/spanc/Interrupt.h"
#include "tools/spanc/IsaOption.h"
#include "tools/spanc/KvCacheCapacity.h"
#include "tools/spanc/KvEventsOption.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/SpanModeOptions.h"
#include "tools/spanc/ThreadsOption.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <chrono>
#include <optional>
#include <thread>

namespace spanc::cli {

namespace {

/// Bounds of the server's own options (the help says them).
constexpr int64_t kMaxBodyBound = int64_t(1) << 30;
constexpr int64_t kMaxQueueBound = 100000;
constexpr int64_t kMaxHttpThreads = 1024;
constexpr int64_t kMaxConnectionsBound = 65536;
constexpr int64_t kMaxTimeoutSeconds = 3600;
constexpr int64_t kMaxQueryCalls = 10000;
constexpr int64_t kMaxQueuedCallsBound = 1000000;

/// spanc serve's own options (the span modes, device, threads and ISA are
/// added by their shared helpers).
void addServeOptions(po::options_description &options) {
  const std::string blockSizeHelp = "tokens per KV cache block, in [1, " +
                                    std::to_string(kernels::kMaxBlockSize) +
                                    "]";
  options.add_options()                                                     //
      ("model,m", po::value<std::string>(),                                 //
       "GGUF model to serve (default: $SPANC_MODEL, else the "              //
       "SmolLM2-135M-Instruct that tools/setup.sh installs)")               //
      ("served-model-name",                                                 //
       po::value<std::vector<std::string>>()->multitoken()->composing(),    //
       "the model's ids in /v1/models, any of which a request's `model` "   //
       "may name: repeatable, comma-separated or space-separated as "       //
       "vLLM's; the first is the primary (metrics, spnl answers). Names "   //
       "match in any case, with or without .gguf (default: the file's "     //
       "name without .gguf)")                                               //
      ("host", po::value<std::string>()->default_value("127.0.0.1"),        //
       "address to listen on (loopback by default; 0.0.0.0 for every "      //
       "interface: then set --api-key)")                                    //
      ("port", po::value<int64_t>()->default_value(8000),                   //
       "TCP port, in [0, 65535] (8000 as vLLM, where spnl looks; 0: any "   //
       "free port, printed on stderr)")                                     //
      ("api-key", po::value<std::string>(),                                 //
       "require 'Authorization: Bearer KEY' on every endpoint but /health " //
       "(default: $SPANC_API_KEY; none: no key)")                           //
      ("max-body", po::value<int64_t>()->default_value(1 << 20),            //
       "largest request body in bytes; a larger one gets 413")              //
      ("max-queue", po::value<int64_t>()->default_value(256),               //
       "requests the server holds at once, running or waiting; one more "   //
       "gets 429 with Retry-After")                                         //
      ("max-queued-calls", po::value<int64_t>()->default_value(4096),       //
       "model calls the server holds at once, running or waiting (a "       //
       "choice of n, a call of a /v1/query program); a request whose "      //
       "calls would pass it gets 429 with Retry-After, one that makes "     //
       "more calls than this 400. At least --max-query-calls")              //
      ("max-running-per-request", po::value<int64_t>()->default_value(8),   //
       "calls of one request running at once (0: no cap): admission "       //
       "takes the request with the fewest running calls first, so one "     //
       "client's many calls cannot hold every slot and the cache")          //
      ("max-prefill-per-request", po::value<int64_t>()->default_value(256), //
       "prompt tokens one request may compute in a step while another "     //
       "request has a prompt to compute too (0: no cap; besides an equal "  //
       "share of --step-tokens); what they leave goes to anyone")           //
      ("max-tokens-limit", po::value<int64_t>()->default_value(4096),       //
       "largest max_tokens a request may ask for (400 above it)")           //
      ("default-max-tokens", po::value<int64_t>()->default_value(256),      //
       "max_tokens of a request that gives none (bounded by "               //
       "--max-tokens-limit)")                                               //
      ("max-prompt-tokens", po::value<int64_t>()->default_value(0),         //
       "largest prompt in tokens (400 above it, naming this option); 0: "   //
       "the model's context (400 above it, naming the context). A prompt "  //
       "plus its max_tokens must fit the context in any case")              //
      ("max-query-calls", po::value<int64_t>()->default_value(256),         //
       "model calls a /v1/query program may make, its repeats' samples "    //
       "included (400 above it)")                                           //
      ("corpus", po::value<std::vector<std::string>>()->composing(),        //
       "NAME=DIR: a corpus programs sent over the network may retrieve "    //
       "from by NAME (repeatable; indexed at start; no other folder is "    //
       "read on a network program's behalf)")                               //
      ("index-dir", po::value<std::string>(),                               //
       "folder of corpus index files (default: $SPANC_INDEX_DIR, else "     //
       "~/.cache/spanc/index)")                                             //
      ("http-threads", po::value<int64_t>()->default_value(64),             //
       "threads answering requests; each holds one connection from the "    //
       "end of its request's headers to the end of its answer, so this "    //
       "bounds the requests answered at once")                              //
      ("max-connections", po::value<int64_t>()->default_value(512),         //
       "connections open at once, idle or sending included; one more "      //
       "gets 503 (each needs a file descriptor: keep it under ulimit -n)")  //
      ("header-timeout", po::value<int64_t>()->default_value(10),           //
       "seconds from a request's first byte to the end of its headers; "    //
       "later gets 408 and the connection closes (a client sending "        //
       "slowly holds a socket, never a thread)")                            //
      ("body-timeout", po::value<int64_t>()->default_value(30),             //
       "seconds from the end of a request's headers to the end of its "     //
       "body; later gets 408 (a body of at most 64 KiB is read before a "   //
       "thread takes the request)")                                         //
      ("cache", po::value<std::string>()->default_value("span"),            //
       "KV cache mode: span, prefix (stock prefix caching) or off")         //
      ("relocation",
       po::value<std::string>()->default_value("rope-in-kernel"),          //
       "how reused spans move: rerope or rope-in-kernel")                  //
      ("kv-cache", po::value<std::string>()->default_value("65536"),       //
       "KV cache capacity: tokens, rounded down to whole blocks, or "      //
       "memory (512MiB, 2GiB). A prompt longer than the whole cache is "   //
       "refused (400); one whose max_tokens does not fit after it "        //
       "generates what fits and ends with finish_reason \"length\"")       //
      ("kv-prefault",                                                      //
       "fault the whole KV cache's memory in at startup, so that no "      //
       "request pays for first touching it (on a VM whose host backs "     //
       "memory lazily, ~3 ms a MiB: ~300 ms of a first 4k-token prompt); " //
       "the cache then counts in RSS from the start")                      //
      ("block-size", po::value<int64_t>()->default_value(16),              //
       blockSizeHelp.c_str())                                              //
      ("step-tokens", po::value<int64_t>()->default_value(512),            //
       "token budget of one scheduler step (decode tokens + prefill)")     //
      ("kv-precision", po::value<std::string>()->default_value("f16"),     //
       "K/V storage: f16 or f32")                                          //
      ("batch-invariant",                                                  //
       "f32 GEMMs and attention products everywhere (slower prefill)")     //
      ("fixed-threads", "-t is a ceiling: fewer threads run while other "  //
                        "processes take cores; with this, always -t threads");
}

/// What --help says besides the options: the endpoints, the errors and the
/// signals.
std::string serveDescription() {
  const std::string about =
      "Serves the model over HTTP with one scheduler and one KV cache for\n"
      "every request: requests that arrive while others run join the next\n"
      "step (continuous batching), and a chat request reuses the blocks a\n"
      "span query or another chat left (same messages, same blocks).\n\n"
      "Endpoints (OpenAI's shapes, as vLLM and llama.cpp serve them):\n"
      "  POST /v1/chat/completions  messages through the model's chat "
      "template\n"
      "  POST /v1/completions       a prompt or a list of prompts\n"
      "       both: max_tokens (or max_completion_tokens, which wins), "
      "temperature,\n"
      "       top_p, seed, stop (up to 4), n (up to 16),\n"
      "       stream (server-sent events ending in 'data: [DONE]'),\n"
      "       stream_options.include_usage, logit_bias (token id -> bias "
      "in\n"
      "       [-100, 100], up to 300), top_k (vLLM's), logprobs (chat: "
      "true and\n"
      "       top_logprobs up to 20; completions: up to 20; the model's "
      "own, before\n"
      "       bias and temperature; not with stream); usage with\n"
      "       prompt_tokens_details.cached_tokens. Fields OpenAI defines "
      "and the\n"
      "       server does not honour (tools, tool_choice other than "
      "none,\n"
      "       response_format other than text, penalties, echo, suffix, "
      "best_of\n"
      "       other than n) are a 400 naming the field; reasoning_effort "
      "(none to\n"
      "       xhigh) is accepted and ignored (the model has no reasoning "
      "mode);\n"
      "       unknown fields are ignored. `model` names any "
      "--served-model-name,\n"
      "       in any case, with or without .gguf\n"
      "  POST /v1/query             a .span program or spnl JSON as the body\n"
      "       (?set=NAME%3DVALUE, URL-encoded, overrides a param): each\n"
      "       query's answers and per-call statistics; file() is refused,\n"
      "       retrieve() (spnl: augment) reads only a --corpus NAME; a "
      ".span gen\n"
      "       naming a model other than the one served is a 404, as a "
      "chat naming\n"
      "       it (spnl JSON's \"model\" routes spnl's client: any name "
      "is taken)\n"
      "  POST /v1/query/execute     spnl's endpoint, as spnl's client calls "
      "it: spnl\n"
      "       JSON as text/plain, ?stream=true|false; completion chunks "
      "(SSE) or\n"
      "       one (chat) completion, a choice per answer (its \"model\" "
      "routes\n"
      "       spnl's client, so any name is taken)\n"
      "  POST /v1/query/plan        a .span program or spnl JSON, compiled, "
      "not run:\n"
      "       its calls' KV block layout as 'spanc compile --emit=plan' "
      "prints it\n"
      "       (hashes as the cache's; for routers: "
      "deploy/router/span_router.py)\n"
      "  GET  /v1/models            the model served, one entry per "
      "served name\n"
      "  GET  /metrics              Prometheus text, vLLM's metric names\n"
      "  GET  /health               200 while serving (no key needed)\n\n"
      "KV events (--kv-events, for KV-aware routers such as NVIDIA Dynamo's):\n"
      "  every block the cache stores or evicts, in vLLM's format: ZeroMQ "
      "PUB,\n"
      "  [topic, 8-byte sequence, msgpack [ts, events, dp_rank]]; the "
      "first batch is\n"
      "  AllBlocksCleared; spanc:kv_cached_blocks on /metrics is what they "
      "add up to.\n"
      "  /v1/completions takes token-id prompts for routers that "
      "tokenize.\n\n"
      "Errors are OpenAI-style JSON ({\"error\": {\"message\", \"type\", "
      "\"param\", \"code\"}}):\n"
      "  400 malformed JSON (with line and column) or nested over 256 "
      "levels, a bad\n"
      "      or unsupported field, a prompt over --max-prompt-tokens, the "
      "context or\n"
      "      the whole --kv-cache, max_tokens over --max-tokens-limit or "
      "past the\n"
      "      context; 401 missing or wrong key (the scheme 'Bearer' in any "
      "case); 404\n"
      "      unknown model or path; 405 wrong method (with Allow; OPTIONS "
      "answers 200\n"
      "      with Allow, no key needed, no CORS headers); 408 headers "
      "later\n"
      "      than --header-timeout or a body later than --body-timeout; 413 "
      "body over\n"
      "      --max-body (a chunked one too, cut off as it passes it, the rest "
      "unread);\n"
      "      429 more than --max-queue requests or --max-queued-calls calls "
      "(with\n"
      "      Retry-After); 431 headers over\n"
      "      64 KiB; 500 a call that failed; 503 more than --max-connections\n"
      "      connections. Requests pipelined on a connection are answered in "
      "order.\n\n"
      "SIGINT or SIGTERM: stop accepting, cancel the requests in flight, "
      "exit 0.\n\n" +
      limitsHelp(ThreadsLimit);
  return about;
}

/// The server's sizes and limits, each read within the bounds its help
/// states.
struct ServeLimits {
  int64_t port = 0;
  int64_t maxBody = 0;
  int64_t maxQueue = 0;
  int64_t maxTokensLimit = 0;
  int64_t defaultMaxTokens = 0;
  int64_t maxPromptTokens = 0;
  int64_t maxQueryCalls = 0;
  int64_t maxQueuedCalls = 0;
  int64_t httpThreads = 0;
  int64_t maxConnections = 0;
  int64_t headerTimeout = 0;
  int64_t bodyTimeout = 0;
};

/// Reads the limits, and the scheduler's block size, step budget and
/// per-request caps into `executorOptions`; nothing (reported) when one is
/// out of range.
std::optional<ServeLimits>
readServeLimits(const po::variables_map &values,
                sched::ExecutorOptions &executorOptions) {
  std::optional<int64_t> blockSize =
      readBoundedInt("serve", values, "block-size", 1, kernels::kMaxBlockSize);
  std::optional<int64_t> port =
      readBoundedInt("serve", values, "port", 0, 65535);
  std::optional<int64_t> maxBody =
      readBoundedInt("serve", values, "max-body", 1, kMaxBodyBound);
  std::optional<int64_t> maxQueue =
      readBoundedInt("serve", values, "max-queue", 1, kMaxQueueBound);
  std::optional<int64_t> maxTokensLimit = readBoundedInt(
      "serve", values, "max-tokens-limit", 1, kernels::kMaxContextLength);
  std::optional<int64_t> defaultMaxTokens = readBoundedInt(
      "serve", values, "default-max-tokens", 1, kernels::kMaxContextLength);
  std::optional<int64_t> maxPromptTokens = readBoundedInt(
      "serve", values, "max-prompt-tokens", 0, kernels::kMaxContextLength);
  std::optional<int64_t> maxQueryCalls =
      readBoundedInt("serve", values, "max-query-calls", 1, kMaxQueryCalls);
  std::optional<int64_t> maxQueuedCalls = readBoundedInt(
      "serve", values, "max-queued-calls", 1, kMaxQueuedCallsBound);
  std::optional<int64_t> maxRunningPerRequest = readBoundedInt(
      "serve", values, "max-running-per-request", 0, kMaxQueuedCallsBound);
  std::optional<int64_t> maxPrefillPerRequest =
      readBoundedInt("serve", values, "max-prefill-per-request", 0,
                     kernels::kMaxContextLength);
  std::optional<int64_t> httpThreads =
      readBoundedInt("serve", values, "http-threads", 1, kMaxHttpThreads);
  std::optional<int64_t> maxConnections = readBoundedInt(
      "serve", values, "max-connections", 1, kMaxConnectionsBound);
  std::optional<int64_t> headerTimeout =
      readBoundedInt("serve", values, "header-timeout", 1, kMaxTimeoutSeconds);
  std::optional<int64_t> bodyTimeout =
      readBoundedInt("serve", values, "body-timeout", 1, kMaxTimeoutSeconds);
  if (!blockSize || !port || !maxBody || !maxQueue || !maxTokensLimit ||
      !defaultMaxTokens || !maxPromptTokens || !maxQueryCalls || !httpThreads ||
      !maxConnections || !headerTimeout || !bodyTimeout || !maxQueuedCalls ||
      !maxRunningPerRequest || !maxPrefillPerRequest)
    return std::nullopt;
  // A span query within its limit must fit, or it could never be taken.
  if (*maxQueuedCalls < *maxQueryCalls) {
    reportError("serve", "--max-queued-calls " +
                             std::to_string(*maxQueuedCalls) +
                             " is below --max-query-calls (" +
                             std::to_string(*maxQueryCalls) +
                             "): such a query could never be taken");
    return std::nullopt;
  }
  executorOptions.fairness.maxRunningPerRequest =
      uint32_t(*maxRunningPerRequest);
  executorOptions.fairness.maxPrefillTokensPerRequest = *maxPrefillPerRequest;
  executorOptions.blockSize = unsigned(*blockSize);
  executorOptions.stepTokenBudget = values["step-tokens"].as<int64_t>();
  ServeLimits limits;
  limits.port = *port;
  limits.maxBody = *maxBody;
  limits.maxQueue = *maxQueue;
  limits.maxTokensLimit = *maxTokensLimit;
  limits.defaultMaxTokens = *defaultMaxTokens;
  limits.maxPromptTokens = *maxPromptTokens;
  limits.maxQueryCalls = *maxQueryCalls;
  limits.maxQueuedCalls = *maxQueuedCalls;
  limits.httpThreads = *httpThreads;
  limits.maxConnections = *maxConnections;
  limits.headerTimeout = *headerTimeout;
  limits.bodyTimeout = *bodyTimeout;
  return limits;
}

/// The corpora of --corpus, indexed before the model loads so that a wrong
/// folder is reported first.
llvm::Expected<std::unique_ptr<retrieval::CorpusCatalog>>
openCorpora(const po::variables_map &values) {
  std::vector<std::pair<std::string, std::string>> corpora;
  if (values.count("corpus"))
    for (const std::string &flag :
         values["corpus"].as<std::vector<std::string>>()) {
      auto corpus = retrieval::parseCorpusFlag(flag);
      if (!corpus)
        return corpus.takeError();
      corpora.push_back(std::move(*corpus));
    }
  retrieval::IndexOptions indexOptions;
  if (values.count("index-dir"))
    indexOptions.indexDirectory = values["index-dir"].as<std::string>();
  deferInterrupts();
  auto catalog =
      retrieval::CorpusCatalog::open(corpora, indexOptions, interruptRequested);
  if (!catalog)
    return catalog.takeError();
  for (const auto &entry : (*catalog)->entries())
    llvm::errs() << "spanc serve: corpus " << entry->name << " = "
                 << entry->directory << " (" << entry->stats.fragmentsTotal
                 << " fragments)\n";
  return std::move(*catalog);
}

/// The model served, with its tokenizer and chat template.
struct ServedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<model::ChatTemplate> chatTemplate;
};

/// Loads the model for `device` (K/V precision, batch invariance); nothing
/// (reported) when it cannot be.
std::optional<ServedModel> loadServedModel(const po::variables_map &values,
                                           backend::Device device,
                                           const std::string &modelPath) {
  model::ModelOptions modelOptions;
  modelOptions.forceF32 = values.count("batch-invariant") != 0;
  std::optional<GemmChoices> gemmChoices = readGemmOptions("serve", values);
  if (!gemmChoices)
    return std::nullopt;
  modelOptions.gemmWeightCopy = gemmChoices->weightCopy;
  modelOptions.quantizedPrompt = gemmChoices->quantizedPrompt;
  const std::string kvPrecision = values["kv-precision"].as<std::string>();
  if (kvPrecision != "f16" && kvPrecision != "f32") {
    reportError("serve",
                "--kv-precision '" + kvPrecision + "': expected f16 or f32");
    return std::nullopt;
  }
  modelOptions.halfPrecisionKv = kvPrecision == "f16";
  // The CUDA backend uploads the file's tensors itself.
  modelOptions.hostWeights = device == backend::Device::Cpu;
  auto model = model::Model::load(modelPath, modelOptions);
  if (!model) {
    reportError("serve", "cannot load model '" + modelPath +
                             "': " + llvm::toString(model.takeError()) +
                             " (tools/setup.sh installs the default)");
    return std::nullopt;
  }
  auto tokenizer = model::Tokenizer::fromGguf((*model)->file());
  if (!tokenizer) {
    reportError("serve", llvm::toString(tokenizer.takeError()));
    return std::nullopt;
  }
  auto chatTemplate =
      model::ChatTemplate::fromGguf((*model)->file(), **tokenizer);
  if (!chatTemplate) {
    reportError("serve", llvm::toString(chatTemplate.takeError()));
    return std::nullopt;
  }
  ServedModel served;
  served.model = std::move(*model);
  served.tokenizer = std::move(*tokenizer);
  served.chatTemplate =
      std::make_unique<model::ChatTemplate>(std::move(*chatTemplate));
  return served;
}

/// What the HTTP front needs to check and answer requests.
server::HttpOptions httpOptionsFor(const po::variables_map &values,
                                   const ServeLimits &limits,
                                   const model::Model &model,
                                   int64_t cacheTokens,
                                   const server::ModelNames &modelNames,
                                   const retrieval::CorpusCatalog *corpora) {
  const int64_t contextLength = model.config().contextLength;
  server::HttpOptions httpOptions;
  if (values.count("api-key"))
    httpOptions.apiKey = values["api-key"].as<std::string>();
  else if (const char *key = std::getenv("SPANC_API_KEY"))
    httpOptions.apiKey = key;
  httpOptions.maxBodyBytes = size_t(limits.maxBody);
  httpOptions.httpThreads = size_t(limits.httpThreads);
  httpOptions.maxConnections = size_t(limits.maxConnections);
  httpOptions.headerTimeout = std::chrono::seconds(limits.headerTimeout);
  httpOptions.bodyTimeout = std::chrono::seconds(limits.bodyTimeout);
  httpOptions.requestLimits.models = modelNames;
  httpOptions.requestLimits.maxTokensLimit = limits.maxTokensLimit;
  httpOptions.requestLimits.defaultMaxTokens = limits.defaultMaxTokens;
  httpOptions.requestLimits.vocabSize = model.config().vocabSize;
  httpOptions.promptLimits.contextLength = contextLength;
  // Unset (0), the context bounds a prompt, and errors name the context.
  httpOptions.promptLimits.maxPromptTokens = limits.maxPromptTokens;
  httpOptions.promptLimits.kvCacheTokens = cacheTokens;
  httpOptions.spanQueryLimits.maxCalls = limits.maxQueryCalls;
  httpOptions.spanQueryLimits.maxTokensLimit = limits.maxTokensLimit;
  httpOptions.spanQueryLimits.maxPromptTokens =
      httpOptions.promptLimits.maxPromptTokens;
  httpOptions.spanQueryLimits.contextLength = contextLength;
  httpOptions.spanQueryLimits.kvCacheTokens = cacheTokens;
  httpOptions.spanQueryLimits.models = modelNames;
  httpOptions.spanQueryLimits.corpora = corpora;
  return httpOptions;
}

} // namespace

int runServe(const std::vector<std::string> &args) {
  po::options_description options("Options");
  addServeOptions(options);
  addSpanModeOptions(options);
  addDeviceOption(options);
  addThreadsOption(options);
  addGemmOptions(options);
  addIsaOption(options);
  addKvEventsOptions(options);
  const std::string about = serveDescription();
  ParsedCommandLine parsed = parseCommandLine(
      "serve", "spanc serve [--model M] [options]", about.c_str(), options,
      po::positional_options_description(), args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;

  sched::ExecutorOptions executorOptions;
  if (!readExecutorChoices("serve", values, executorOptions))
    return 1;
  executorOptions.prefaultKv = values.count("kv-prefault") > 0;
  std::optional<ServeLimits> limits = readServeLimits(values, executorOptions);
  if (!limits)
    return 1;
  server::KvEventOptions kvEventOptions;
  bool kvEvents = false;
  if (!readKvEventsOptions(values, executorOptions.blockSize, kvEventOptions,
                           kvEvents))
    return 1;
  if (!applyIsaOption("serve", values))
    return 1;
  if (!applyThreadsOption("serve", values))
    return 1;
  // The engine thread starts the parallel regions; the count -t set here
  // is per thread, so it is handed over.
  const int threads = omp_get_max_threads();

  auto catalog = openCorpora(values);
  if (!catalog)
    return reportError("serve", llvm::toString(catalog.takeError()));
  const std::string modelPath = values.count("model")
                                    ? values["model"].as<std::string>()
                                    : defaultModelPath();
  // Checked before the model loads: a wrong flag is reported at once.
  auto modelNames = server::ModelNames::fromFlags(
      values.count("served-model-name")
          ? values["served-model-name"].as<std::vector<std::string>>()
          : std::vector<std::string>(),
      llvm::sys::path::stem(modelPath));
  if (!modelNames)
    return reportError("serve", llvm::toString(modelNames.takeError()));
  std::optional<ServedModel> served =
      loadServedModel(values, executorOptions.device, modelPath);
  if (!served)
    return 1;
  model::ChatTemplateEncoder encoder(*served->chatTemplate, *served->tokenizer);
  auto cacheTokens = kvCacheTokens(values["kv-cache"].as<std::string>(),
                                   *served->model, executorOptions.blockSize);
  if (!cacheTokens)
    return reportError("serve", llvm::toString(cacheTokens.takeError()));
  executorOptions.cacheTokens = *cacheTokens;
  auto executor = sched::Executor::create(*served->model, *served->tokenizer,
                                          executorOptions);
  if (!executor)
    return reportError("serve", llvm::toString(executor.takeError()));

  const std::string &modelName = modelNames->primary();
  server::HttpOptions httpOptions =
      httpOptionsFor(values, *limits, *served->model, *cacheTokens, *modelNames,
                     catalog->get());
  // POST /v1/query/plan lays requests out as the engine will.
  httpOptions.planLayout = server::PlanLayout{
      (*executor)->hasher(), executorOptions.cacheMode,
      executorOptions.spanOptions, unsigned(executorOptions.blockSize)};

  server::ServerMetrics metrics(modelName, executorOptions.blockSize,
                                (*executor)->pool().numBlocks());
  // Before any request, so that subscribers see every block stored.
  std::unique_ptr<server::KvEventPublisher> publisher;
  // The publisher goes before the executor and the metrics, which would
  // still point to it.
  auto detachPublisher = llvm::make_scope_exit([&] {
    (*executor)->pool().setEventSink(nullptr);
    metrics.setKvEventSource(nullptr);
  });
  if (kvEvents) {
    auto created = server::KvEventPublisher::create(kvEventOptions);
    if (!created)
      return reportError("serve", llvm::toString(created.takeError()));
    publisher = std::move(*created);
    (*executor)->pool().setEventSink(publisher.get());
    metrics.setKvEventSource([raw = publisher.get()] {
      server::KvEventCounts counts = raw->counts();
      return server::KvEventTotals{counts.batches, counts.events,
                                   counts.dropped, counts.replays};
    });
    llvm::errs() << "spanc serve: KV events on " << publisher->endpoint()
                 << (publisher->replayEndpoint().empty()
                         ? std::string()
                         : ", replay on " + publisher->replayEndpoint())
                 << "\n";
  }
  std::optional<cpu::AdaptiveThreads> adaptiveThreads;
  const bool adaptThreads = values.count("fixed-threads") == 0;
  server::Engine::ThreadHooks hooks;
  hooks.atStart = [&] {
    omp_set_num_threads(threads);
    if (adaptThreads)
      adaptiveThreads.emplace();
  };
  hooks.afterStep = [&] {
    if (adaptiveThreads)
      adaptiveThreads->afterStep();
  };
  server::Engine engine(**executor, metrics, size_t(limits->maxQueue), hooks,
                        /*maxSessionCalls=*/65536,
                        size_t(limits->maxQueuedCalls));
  server::HttpServer http(engine, metrics, encoder, *served->tokenizer,
                          httpOptions);
  const std::string host = values["host"].as<std::string>();
  auto bound = http.bind(host, int(limits->port));
  if (!bound)
    return reportError("serve", llvm::toString(bound.takeError()));
  engine.start();
  std::thread listener([&] { http.serve(); });
  llvm::errs() << "spanc serve: serving " << llvm::join(modelNames->all(), ", ")
               << " on http://" << host << ":" << *bound << " ("
               << (*executor)->pool().numBlocks() << " KV blocks of "
               << executorOptions.blockSize << " tokens"
               << (httpOptions.apiKey.empty() ? "" : ", API key required")
               << ")\n";
  llvm::errs().flush();

  while (!interruptRequested())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Stop accepting first; requests still in flight are cancelled so that
  // the threads serving them end, then the listener returns.
  http.stop();
  engine.shutdown("cancelled: the server is shutting down");
  listener.join();

  llvm::errs() << "spanc serve: stopped (signal " << interruptExitCode() - 128
               << ")\n";
  return 0;
}

} // namespace spanc::cli
