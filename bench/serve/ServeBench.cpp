//===- ServeBench.cpp - `spanc bench serve`: the server under concurrency -===//
//
// Throughput and time to first token of HTTP servers on one RAG workload,
// at 1, 4, 16 and 64 concurrent clients, side by side in one run:
//   span          `spanc serve --cache=span`: each request a span query
//                 (POST /v1/query) whose documents are the spans of a plus,
//                 so a document is reused wherever it lands
//   prefix        `spanc serve --cache=prefix`: the same span query bodies;
//                 stock prefix caching (the plus is one causal chain)
//   llama-server  llama.cpp (bench/peers), one slot per client, prompt
//                 caching and --cache-reuse: the same messages through
//                 POST /v1/chat/completions
// The workload: N shared documents of random English words; request i is
// the system prompt, k of the N documents drawn and shuffled with seed i,
// and a question, the same list for every server. Each (clients, server)
// cell starts a fresh server (cold cache) with the same KV capacity in
// tokens; `clients` threads take the next request until all are done.
// TTFT is client-side for every server: the response time less the time
// the server reports from the first token to the last (a span query's
// answer is not streamed), so HTTP, queueing and prefill are in it.
//
// The hog + short request cell (cells=hog; issue 25, point 7): one client
// sends a span query of repeat(hog-calls) gens of hog-tokens each (within
// every limit of `spanc serve`); beside it, short streamed chats (8
// tokens) are timed to their first token, and the same chats on the idle
// server before it. With baseline=PATH another spanc binary (e.g. one
// built from an older commit) is measured the same way in the same run.
// It writes NAME-hog.md/.tsv/.png.
//
//===----------------------------------------------------------------------===//

#include "bench/serve/ServeHog.h"

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/RandomText.h"
#include "bench/common/Report.h"
#include "bench/common/ServerProcess.h"
#include "bench/peers/LlamaServer.h"
#include "runtime/model/Gguf.h"
#include "runtime/model/Tokenizer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

namespace spanc::bench {

std::string spancBinary() {
  llvm::SmallString<256> path;
  if (llvm::sys::fs::real_path("/proc/self/exe", path))
    return "spanc";
  return std::string(path);
}

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char *kSystemPrompt = "You answer questions using only the documents "
                            "given. Be brief, and name the document.";

struct Settings {
  std::vector<int64_t> clients;
  int64_t requests = 0;
  int64_t documents = 0;
  int64_t perRequest = 0;
  int64_t documentTokens = 0;
  int64_t maxTokens = 0;
  std::vector<std::string> servers;
  std::string peer;
};

/// One request of the workload: which documents in which order, and the
/// question.
struct Request {
  std::vector<unsigned> documents;
  std::string question;
};

struct Workload {
  std::vector<std::string> documents;
  std::vector<Request> requests;
  /// Tokens of KV cache every server gets: one request's worth per client.
  int64_t tokensPerClient = 0;
};

/// What one answered request measured.
struct Row {
  std::string server;
  int64_t clients = 0;
  size_t request = 0;
  double ttftMs = 0;
  double e2eMs = 0;
  int64_t promptTokens = 0;
  int64_t cachedTokens = 0;
  int64_t generatedTokens = 0;
};

/// One (clients, server) cell.
struct Cell {
  std::string server;
  int64_t clients = 0;
  double wallSeconds = 0;
  std::vector<Row> rows;
  std::string error; ///< the first failure; rows are then incomplete
};

llvm::Error failure(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str().c_str());
}

llvm::Expected<Settings> readSettings(const BenchArgs &args) {
  Settings settings;
  auto clients = args.intListSetting(
      "clients", args.quick ? llvm::ArrayRef<int64_t>{1, 4}
                            : llvm::ArrayRef<int64_t>{1, 4, 16, 64});
  auto requests = args.intSetting("requests", args.quick ? 8 : 128);
  auto documents = args.intSetting("docs", args.quick ? 4 : 16);
  auto perRequest = args.intSetting("k", args.quick ? 2 : 4);
  auto documentTokens = args.intSetting("doc-tokens", args.quick ? 32 : 256);
  auto maxTokens = args.intSetting("max-tokens", args.quick ? 4 : 32);
  if (!clients)
    return clients.takeError();
  for (auto *value :
       {&requests, &documents, &perRequest, &documentTokens, &maxTokens})
    if (!*value)
      return value->takeError();
  settings.clients = *clients;
  settings.requests = *requests;
  settings.documents = *documents;
  settings.perRequest = *perRequest;
  settings.documentTokens = *documentTokens;
  settings.maxTokens = *maxTokens;
  for (int64_t count : settings.clients)
    if (count < 1 || count > 512)
      return failure("--set clients: " + llvm::Twine(count) +
                     " is not in 1..512");
  if (settings.requests < 1)
    return failure("--set requests: expected at least 1");
  if (settings.documents < 1 || settings.documents > 1024)
    return failure("--set docs: expected 1..1024");
  if (settings.perRequest < 1 || settings.perRequest > settings.documents)
    return failure("--set k: expected 1..docs");
  if (settings.documentTokens < 8 || settings.documentTokens > 4096)
    return failure("--set doc-tokens: expected 8..4096");
  if (settings.maxTokens < 1 || settings.maxTokens > 4096)
    return failure("--set max-tokens: expected 1..4096");
  const std::string serverList =
      args.setting("servers", "span,prefix,llama-server");
  llvm::SmallVector<llvm::StringRef, 3> names;
  llvm::StringRef(serverList).split(names, ',', -1, false);
  for (llvm::StringRef name : names) {
    name = name.trim();
    if (name != "span" && name != "prefix" && name != "llama-server")
      return failure("--set servers: '" + name +
                     "' is not span, prefix or llama-server");
    settings.servers.push_back(name.str());
  }
  settings.peer = args.setting("peer", "auto");
  if (settings.peer != "auto" && settings.peer != "on" &&
      settings.peer != "off")
    return failure("--set peer=" + settings.peer +
                   ": expected auto, on or off");
  return settings;
}

llvm::Expected<Workload> makeWorkload(const BenchArgs &args,
                                      const Settings &settings) {
  auto gguf = model::GgufFile::open(args.modelPath);
  if (!gguf)
    return gguf.takeError();
  auto tokenizer = model::Tokenizer::fromGguf(**gguf);
  if (!tokenizer)
    return tokenizer.takeError();
  Workload workload;
  for (int64_t index = 0; index < settings.documents; ++index)
    workload.documents.push_back(
        makeDocument(**tokenizer, args.seed * 1000003 + uint64_t(index),
                     size_t(settings.documentTokens)));
  llvm::ArrayRef<const char *> words = englishWords();
  for (int64_t index = 0; index < settings.requests; ++index) {
    std::mt19937_64 random(args.seed * 7919 + uint64_t(index));
    Request request;
    std::vector<unsigned> all(size_t(settings.documents));
    for (unsigned document = 0; document < all.size(); ++document)
      all[document] = document;
    std::shuffle(all.begin(), all.end(), random);
    request.documents.assign(all.begin(), all.begin() + settings.perRequest);
    request.question = std::string("Question ") + std::to_string(index) +
                       ": which document says '" +
                       words[random() % words.size()] + " " +
                       words[random() % words.size()] + "'?";
    workload.requests.push_back(std::move(request));
  }
  // The chat template adds a few tokens per message; the question and the
  // system prompt are short. Rounded up to whole blocks of 16.
  int64_t perClient = settings.perRequest * (settings.documentTokens + 16) +
                      128 + settings.maxTokens;
  workload.tokensPerClient = (perClient + 15) / 16 * 16;
  return workload;
}

/// The span query of a request: the documents as the spans of a plus.
std::string spanQueryBody(const Workload &workload, const Request &request,
                          int64_t maxTokens) {
  std::string body =
      "query q {\n  gen(max_tokens = " + std::to_string(maxTokens) +
      ", temperature = 0) {\n    system " + spanLiteral(kSystemPrompt) +
      "\n    plus {\n";
  for (unsigned document : request.documents)
    body += "      user " + spanLiteral(workload.documents[document]) + "\n";
  body += "    }\n    user " + spanLiteral(request.question) + "\n  }\n}\n";
  return body;
}

/// The same request as chat messages.
std::string chatBody(const Workload &workload, const Request &request,
                     int64_t maxTokens) {
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", kSystemPrompt}});
  for (unsigned document : request.documents)
    messages.push_back(
        {{"role", "user"}, {"content", workload.documents[document]}});
  messages.push_back({{"role", "user"}, {"content", request.question}});
  json body = {{"messages", messages},
               {"max_tokens", maxTokens},
               {"temperature", 0},
               {"cache_prompt", true}};
  return body.dump();
}

/// Sends request `index` to a spanc server; fills the row or says why not.
llvm::Error askSpanc(httplib::Client &client, const Workload &workload,
                     const Settings &settings, size_t index, Row &row) {
  std::string body =
      spanQueryBody(workload, workload.requests[index], settings.maxTokens);
  Clock::time_point begin = Clock::now();
  httplib::Result response = client.Post("/v1/query", body, "text/plain");
  double e2eMs =
      std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  if (!response)
    return failure("POST /v1/query failed: " +
                   httplib::to_string(response.error()));
  json answer = json::parse(response->body, nullptr, false);
  if (response->status != 200 || answer.is_discarded() ||
      !answer.contains("calls") || answer["calls"].size() != 1)
    return failure("POST /v1/query answered " + llvm::Twine(response->status) +
                   ": " + llvm::StringRef(response->body).take_front(300));
  const json &call = answer["calls"][0];
  if (!call.value("succeeded", false))
    return failure("the span query failed: " +
                   call.value("error", std::string("?")));
  double decodeMs =
      (call.value("total_seconds", 0.0) - call.value("ttft_seconds", 0.0)) *
      1000;
  row.e2eMs = e2eMs;
  row.ttftMs = std::max(0.0, e2eMs - decodeMs);
  row.promptTokens = call.value("prompt_tokens", int64_t(0));
  row.cachedTokens = call.value("reused_tokens", int64_t(0));
  row.generatedTokens = call.value("generated_tokens", int64_t(0));
  return llvm::Error::success();
}

/// Sends request `index` to llama-server as a chat completion.
llvm::Error askLlama(httplib::Client &client, const Workload &workload,
                     const Settings &settings, size_t index, Row &row) {
  std::string body =
      chatBody(workload, workload.requests[index], settings.maxTokens);
  Clock::time_point begin = Clock::now();
  httplib::Result response =
      client.Post("/v1/chat/completions", body, "application/json");
  double e2eMs =
      std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  if (!response)
    return failure("POST /v1/chat/completions failed: " +
                   httplib::to_string(response.error()));
  json answer = json::parse(response->body, nullptr, false);
  if (response->status != 200 || answer.is_discarded() ||
      !answer.contains("usage") || !answer.contains("timings"))
    return failure("POST /v1/chat/completions answered " +
                   llvm::Twine(response->status) +
                   " without usage and timings: " +
                   llvm::StringRef(response->body).take_front(300));
  const json &usage = answer["usage"];
  const json &timings = answer["timings"];
  row.e2eMs = e2eMs;
  row.ttftMs = std::max(0.0, e2eMs - timings.value("predicted_ms", 0.0));
  row.promptTokens = usage.value("prompt_tokens", int64_t(0));
  // prompt_n: the tokens it computed; the rest came from its cache.
  row.cachedTokens =
      std::max<int64_t>(0, row.promptTokens - timings.value("prompt_n", 0));
  row.generatedTokens = usage.value("completion_tokens", int64_t(0));
  return llvm::Error::success();
}

/// Runs every request against one server with `clients` threads.
Cell runCell(const std::string &server, int64_t clients, int port,
             const Workload &workload, const Settings &settings) {
  Cell cell;
  cell.server = server;
  cell.clients = clients;
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::vector<std::thread> threads;
  Clock::time_point begin = Clock::now();
  for (int64_t thread = 0; thread < clients; ++thread)
    threads.emplace_back([&] {
      httplib::Client client(kLoopbackHost, port);
      client.set_keep_alive(true);
      client.set_connection_timeout(30, 0);
      client.set_read_timeout(kRequestTimeoutSeconds, 0);
      client.set_write_timeout(60, 0);
      for (size_t index = next++; index < workload.requests.size();
           index = next++) {
        Row row;
        row.server = server;
        row.clients = clients;
        row.request = index;
        llvm::Error error =
            server == "llama-server"
                ? askLlama(client, workload, settings, index, row)
                : askSpanc(client, workload, settings, index, row);
        std::lock_guard<std::mutex> lock(mutex);
        if (error) {
          if (cell.error.empty())
            cell.error = llvm::toString(std::move(error));
          else
            llvm::consumeError(std::move(error));
          // The others stop at their next request.
          next = workload.requests.size();
          return;
        }
        cell.rows.push_back(row);
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  cell.wallSeconds =
      std::chrono::duration<double>(Clock::now() - begin).count();
  llvm::sort(cell.rows,
             [](const Row &a, const Row &b) { return a.request < b.request; });
  return cell;
}

/// Starts the server a cell measures; its description goes to `described`.
llvm::Expected<std::unique_ptr<ServerProcess>>
startSpanc(const BenchArgs &args, const std::string &cacheMode, int64_t clients,
           const Workload &workload, std::string &described) {
  std::vector<std::string> arguments = {
      spancBinary(),
      "serve",
      "--model",
      args.modelPath,
      "--cache=" + cacheMode,
      "--kv-cache",
      std::to_string(workload.tokensPerClient * clients),
      "--http-threads",
      std::to_string(std::max<int64_t>(64, clients + 8)),
      "--max-queue",
      std::to_string(std::max<int64_t>(256, clients * 2))};
  if (args.threads > 0) {
    arguments.push_back("-t");
    arguments.push_back(std::to_string(args.threads));
  }
  described =
      "spanc serve " + llvm::join(arguments.begin() + 2, arguments.end(), " ");
  return ServerProcess::start("spanc serve", arguments);
}

llvm::Error runConcurrency(const BenchArgs &args) {
  auto settings = readSettings(args);
  if (!settings)
    return settings.takeError();
  auto workload = makeWorkload(args, *settings);
  if (!workload)
    return workload.takeError();
  const int threads = args.threads > 0
                          ? args.threads
                          : int(std::thread::hardware_concurrency());

  // The peer column, when it can be had (peer=auto: when llama-server
  // starts; its first failure leaves the column out, with the reason).
  bool wantPeer = settings->peer != "off" &&
                  llvm::is_contained(settings->servers, "llama-server");
  std::string peerNote;

  LoadSampler load;
  Clock::time_point begin = Clock::now();
  std::vector<Cell> cells;
  std::map<std::string, std::string> described;
  for (int64_t clients : settings->clients) {
    for (const std::string &server : settings->servers) {
      if (server == "llama-server" && !wantPeer)
        continue;
      llvm::errs() << "serve: " << server << ", " << clients
                   << " clients ...\n";
      std::unique_ptr<ServerProcess> process;
      std::unique_ptr<LlamaServer> peer;
      int port = 0;
      if (server == "llama-server") {
        LlamaServerOptions options;
        options.modelPath = args.modelPath;
        options.parallel = int(clients);
        options.contextTokens = int(workload->tokensPerClient * clients);
        options.threads = threads;
        auto started = LlamaServer::start(options);
        if (!started) {
          std::string reason = llvm::toString(started.takeError());
          if (settings->peer == "on")
            return failure("--set peer=on: " + reason);
          peerNote = "llama-server left out: " + reason;
          llvm::errs() << "serve: " << peerNote << "\n";
          wantPeer = false;
          continue;
        }
        peer = std::move(*started);
        port = peer->port();
        described[server] = peer->describe() + ", -np and -c per row";
      } else {
        auto started =
            startSpanc(args, server, clients, *workload, described[server]);
        if (!started)
          return started.takeError();
        process = std::move(*started);
        port = process->port();
      }
      Cell cell = runCell(server, clients, port, *workload, *settings);
      if (!cell.error.empty())
        return failure(server + " at " + llvm::Twine(clients) +
                       " clients: " + cell.error);
      cells.push_back(std::move(cell));
    }
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  std::string loadLine = load.stopAndDescribe();

  // --- serve.tsv ---------------------------------------------------------
  std::string tsv = "server\tclients\trequest\tttft_ms\te2e_ms\tprompt_"
                    "tokens\tcached_tokens\tgenerated_tokens\tcell_wall_s\n";
  for (const Cell &cell : cells)
    for (const Row &row : cell.rows)
      tsv += printed("%s\t%lld\t%zu\t%.3f\t%.3f\t%lld\t%lld\t%lld\t%.3f\n",
                     row.server.c_str(), (long long)row.clients, row.request,
                     row.ttftMs, row.e2eMs, (long long)row.promptTokens,
                     (long long)row.cachedTokens,
                     (long long)row.generatedTokens, cell.wallSeconds);
  if (auto error = writeTextFile(resultPath(args, ".tsv"), tsv))
    return error;

  // --- serve.md ----------------------------------------------------------
  struct Figures {
    double requestsPerSecond = 0, tokensPerSecond = 0;
    double p50 = 0, p90 = 0, p99 = 0, e2e50 = 0;
    double cachedShare = 0, promptMean = 0;
  };
  std::map<std::pair<std::string, int64_t>, Figures> figures;
  for (const Cell &cell : cells) {
    std::vector<double> ttft, e2e;
    int64_t generated = 0, prompt = 0, cached = 0;
    for (const Row &row : cell.rows) {
      ttft.push_back(row.ttftMs);
      e2e.push_back(row.e2eMs);
      generated += row.generatedTokens;
      prompt += row.promptTokens;
      cached += row.cachedTokens;
    }
    Figures &each = figures[{cell.server, cell.clients}];
    each.requestsPerSecond = double(cell.rows.size()) / cell.wallSeconds;
    each.tokensPerSecond = double(generated) / cell.wallSeconds;
    each.p50 = quantile(ttft, 0.5);
    each.p90 = quantile(ttft, 0.9);
    each.p99 = quantile(ttft, 0.99);
    each.e2e50 = quantile(e2e, 0.5);
    each.cachedShare = prompt ? 100.0 * double(cached) / double(prompt) : 0;
    each.promptMean =
        cell.rows.empty() ? 0 : double(prompt) / double(cell.rows.size());
  }

  // The headline: the highest client count, span against the others.
  std::string headline;
  const int64_t most =
      *std::max_element(settings->clients.begin(), settings->clients.end());
  auto spanAtMost = figures.find({"span", most});
  for (const char *other : {"prefix", "llama-server"}) {
    auto found = figures.find({other, most});
    if (spanAtMost == figures.end() || found == figures.end())
      continue;
    headline += printed(
        "- At %lld clients, span against %s: %s the "
        "throughput (%.2f vs %.2f req/s), TTFT p50 %s "
        "lower (%.0f vs %.0f ms), p99 %s lower.\n",
        (long long)most, other,
        formatRatio(spanAtMost->second.requestsPerSecond,
                    found->second.requestsPerSecond)
            .c_str(),
        spanAtMost->second.requestsPerSecond, found->second.requestsPerSecond,
        formatRatio(found->second.p50, spanAtMost->second.p50).c_str(),
        spanAtMost->second.p50, found->second.p50,
        formatRatio(found->second.p99, spanAtMost->second.p99).c_str());
  }
  if (headline.empty())
    headline = "- (needs the span column and another at the same client "
               "count)\n";

  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# spanc serve under concurrency: span cache vs prefix cache"
      << (wantPeer ? " vs llama-server" : "") << "\n\n"
      << "Generated by `spanc bench serve" << commandLine(args)
      << "` (bench/serve/ServeBench.cpp) on " << timestampNow() << " in "
      << llvm::format("%.0f", elapsed) << " s.\n\n"
      << "## Headline\n\n"
      << headline << "\n"
      << "## Setup\n\n"
      << "- Model: `" << llvm::sys::path::filename(args.modelPath)
      << "`, greedy, `max_tokens = " << settings->maxTokens << "`, " << threads
      << " threads per server.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine
      << " (a shared machine: compare servers at one client count, which "
         "ran one after the other, not runs).\n"
      << "- Workload: " << settings->documents
      << " shared documents of random English words, "
      << settings->documentTokens
      << " tokens each; request i = the system prompt, " << settings->perRequest
      << " of the documents drawn and shuffled with seed i, a question; "
      << settings->requests
      << " requests per cell, the same list for every server. A cell is "
         "one server at one client count, started fresh (cold cache); "
         "each client thread sends the next request when its answer "
         "arrives (closed loop).\n"
      << "- Servers (same KV capacity: " << workload->tokensPerClient
      << " tokens per client):\n";
  for (const std::string &server : settings->servers)
    if (described.count(server))
      out << "  - `" << server << "`: `" << described[server] << "`"
          << (server == "llama-server"
                  ? "; the messages through POST /v1/chat/completions\n"
                  : "; each request a span query, POST /v1/query, the "
                    "documents as the `user` spans of a `plus`\n");
  if (!peerNote.empty())
    out << "  - " << peerNote << "\n";
  out << "- TTFT is client-side: the response time less the time the "
         "server reports from first to last token (`total_seconds − "
         "ttft_seconds` of spanc's call, llama-server's "
         "`timings.predicted_ms`); it includes HTTP, queueing and prefill. "
         "Throughput: answered requests (and generated tokens) per second "
         "of the cell's wall time. Cached: prompt tokens the server took "
         "from its cache (spanc `reused_tokens`; llama-server prompt tokens "
         "less `timings.prompt_n`).\n\n"
      << "## Results\n\n"
      << "| clients | server | req/s | gen tok/s | TTFT p50 (ms) | p90 | p99 "
         "| e2e p50 (ms) | cached | prompt tokens |\n"
      << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (int64_t clients : settings->clients)
    for (const std::string &server : settings->servers) {
      auto found = figures.find({server, clients});
      if (found == figures.end())
        continue;
      const Figures &each = found->second;
      out << "| " << clients << " | " << server << " | "
          << printed("%.2f", each.requestsPerSecond) << " | "
          << printed("%.1f", each.tokensPerSecond) << " | "
          << formatMs(each.p50) << " | " << formatMs(each.p90) << " | "
          << formatMs(each.p99) << " | " << formatMs(each.e2e50) << " | "
          << printed("%.0f%%", each.cachedShare) << " | "
          << printed("%.0f", each.promptMean) << " |\n";
    }
  out << "\nRatios at each client count (span against the others; > 1: "
         "span better):\n\n";
  for (int64_t clients : settings->clients) {
    auto span = figures.find({"span", clients});
    if (span == figures.end())
      continue;
    for (const char *other : {"prefix", "llama-server"}) {
      auto found = figures.find({other, clients});
      if (found == figures.end())
        continue;
      out << "- " << clients << " clients, span vs " << other << ": throughput "
          << formatRatio(span->second.requestsPerSecond,
                         found->second.requestsPerSecond)
          << ", TTFT p50 " << formatRatio(found->second.p50, span->second.p50)
          << ", p99 " << formatRatio(found->second.p99, span->second.p99)
          << "\n";
    }
  }
  out << "\nRaw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/serve/plot.py).\n";
  out.flush();
  return finishResults(args, std::move(md));
}

llvm::Error runServe(const BenchArgs &args) {
  const std::string cellList = args.setting("cells", "concurrency,hog");
  llvm::SmallVector<llvm::StringRef, 2> cells;
  llvm::StringRef(cellList).split(cells, ',', -1, false);
  for (llvm::StringRef cell : cells)
    if (cell.trim() != "concurrency" && cell.trim() != "hog")
      return failure("--set cells: '" + cell + "' is not concurrency or hog");
  auto wants = [&](llvm::StringRef name) {
    return llvm::any_of(
        cells, [&](llvm::StringRef cell) { return cell.trim() == name; });
  };
  if (wants("concurrency"))
    if (llvm::Error error = runConcurrency(args))
      return error;
  if (wants("hog"))
    return runHog(args);
  return llvm::Error::success();
}

BenchRegistration registration{
    {"serve",
     "spanc serve under 1-64 concurrent clients on a shared-document RAG "
     "workload: throughput and TTFT p50/p90/p99, --cache=span vs "
     "--cache=prefix vs llama-server; and a short request's TTFT beside a "
     "hog",
     "  clients=1,4,16,64: concurrent clients, one cell each (--quick: 1,4)\n"
     "  requests=128: requests per cell (--quick: 8)\n"
     "  docs=16: shared documents (--quick: 4)\n"
     "  k=4: documents per request, drawn and shuffled (--quick: 2)\n"
     "  doc-tokens=256: tokens per document (--quick: 32)\n"
     "  max-tokens=32: tokens generated per request (--quick: 4)\n"
     "  servers=span,prefix,llama-server: the columns, in this order\n"
     "  peer=auto|on|off: the llama-server column (auto: when the peer "
     "binary is built)\n"
     "  cells=concurrency,hog: which parts run (hog: NAME-hog.md/.tsv/.png)\n"
     "  hog-calls=256: the hog's repeat count (--quick: 16)\n"
     "  hog-tokens=4096: max_tokens of each hog call (--quick: 256)\n"
     "  short-requests=20: short chats timed idle and beside the hog "
     "(--quick: 4)\n"
     "  short-timeout=60: seconds a short chat may wait for its first "
     "token (--quick: 30)\n"
     "  baseline=PATH: another spanc binary measured the same way\n",
     runServe}};

} // namespace

} // namespace spanc::bench
