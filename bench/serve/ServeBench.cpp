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

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char *kSystemPrompt = "You answer questions using only the documents "
                            "given. Be brief, and name the document.";
/// A long answer on a loaded machine: minutes, not hours.
constexpr time_t kRequestTimeoutSeconds = 900;

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

std::string spancBinary() {
  llvm::SmallString<256> path;
  if (llvm::sys::fs::real_path("/proc/self/exe", path))
    return "spanc";
  return std::string(path);
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

std::string formatMs(double value) { return printed("%.0f", value); }

// --- The hog + short request cell ----------------------------------------

struct HogSettings {
  int64_t hogCalls = 0;
  int64_t hogTokens = 0;
  int64_t shortRequests = 0;
  int64_t shortTimeoutSeconds = 0;
  /// Another spanc binary measured the same way (empty: none).
  std::string baseline;
};

llvm::Expected<HogSettings> readHogSettings(const BenchArgs &args) {
  HogSettings settings;
  auto hogCalls = args.intSetting("hog-calls", args.quick ? 16 : 256);
  auto hogTokens = args.intSetting("hog-tokens", args.quick ? 256 : 4096);
  auto shortRequests = args.intSetting("short-requests", args.quick ? 4 : 20);
  auto timeout = args.intSetting("short-timeout", args.quick ? 30 : 60);
  for (auto *value : {&hogCalls, &hogTokens, &shortRequests, &timeout})
    if (!*value)
      return value->takeError();
  settings.hogCalls = *hogCalls;
  settings.hogTokens = *hogTokens;
  settings.shortRequests = *shortRequests;
  settings.shortTimeoutSeconds = *timeout;
  if (settings.hogCalls < 1 || settings.hogCalls > 10000)
    return failure("--set hog-calls: expected 1..10000");
  if (settings.hogTokens < 1 || settings.hogTokens > 4096)
    return failure("--set hog-tokens: expected 1..4096");
  if (settings.shortRequests < 1 || settings.shortRequests > 10000)
    return failure("--set short-requests: expected 1..10000");
  if (settings.shortTimeoutSeconds < 1 || settings.shortTimeoutSeconds > 3600)
    return failure("--set short-timeout: expected 1..3600 seconds");
  settings.baseline = args.setting("baseline", "");
  if (!settings.baseline.empty() &&
      !llvm::sys::fs::can_execute(settings.baseline))
    return failure("--set baseline=" + settings.baseline +
                   ": not an executable");
  return settings;
}

/// Whether a server-sent event stream received so far holds a first token:
/// an event with content or a finish reason (the first event carries the
/// role only), or the end.
bool holdsFirstToken(llvm::StringRef received) {
  llvm::SmallVector<llvm::StringRef, 8> lines;
  received.split(lines, '\n');
  lines.pop_back(); // a line not ended yet
  for (llvm::StringRef line : lines) {
    line = line.trim();
    if (!line.consume_front("data: "))
      continue;
    if (line == "[DONE]")
      return true;
    json event = json::parse(line.begin(), line.end(), nullptr, false);
    if (event.is_discarded() || !event.contains("choices"))
      continue;
    for (const json &choice : event["choices"]) {
      if (choice.contains("finish_reason") &&
          !choice["finish_reason"].is_null())
        return true;
      if (choice.contains("delta") && choice["delta"].contains("content") &&
          choice["delta"]["content"].is_string() &&
          !choice["delta"]["content"].get<std::string>().empty())
        return true;
    }
  }
  return false;
}

/// Milliseconds from sending a short streamed chat to its first token, or
/// none when it had none within `timeoutSeconds` (the connection then
/// closes, which cancels the request). A plain socket: the response is
/// read as it comes, which httplib's client offers for GET only.
std::optional<double> shortChatTtftMs(int port, int64_t timeoutSeconds) {
  json body = {
      {"max_tokens", 8},
      {"temperature", 0},
      {"stream", true},
      {"messages", json::array({{{"role", "user"},
                                 {"content", "Say hello in one sentence."}}})}};
  const std::string payload = body.dump();
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(payload.size()) + "\r\n\r\n" + payload;
  int socketFd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (socketFd < 0)
    return std::nullopt;
  auto closeSocket = llvm::make_scope_exit([&] { ::close(socketFd); });
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const Clock::time_point begin = Clock::now();
  const Clock::time_point deadline =
      begin + std::chrono::seconds(timeoutSeconds);
  if (::connect(socketFd, reinterpret_cast<sockaddr *>(&address),
                sizeof(address)) != 0)
    return std::nullopt;
  for (size_t sent = 0; sent < request.size();) {
    ssize_t count = ::send(socketFd, request.data() + sent,
                           request.size() - sent, MSG_NOSIGNAL);
    if (count <= 0)
      return std::nullopt;
    sent += size_t(count);
  }
  std::string received;
  char buffer[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0)
      return std::nullopt;
    pollfd wait{socketFd, POLLIN, 0};
    if (::poll(&wait, 1, int(std::min<int64_t>(left, 1000))) <= 0)
      continue;
    ssize_t count = ::recv(socketFd, buffer, sizeof(buffer), 0);
    if (count <= 0)
      return std::nullopt; // closed without a token: an error answer
    received.append(buffer, size_t(count));
    size_t headEnd = received.find("\r\n\r\n");
    if (headEnd != std::string::npos &&
        holdsFirstToken(llvm::StringRef(received).drop_front(headEnd + 4)))
      return std::chrono::duration<double, std::milli>(Clock::now() - begin)
          .count();
  }
}

/// What /metrics says of the load: calls running and waiting, KV usage.
struct ServerLoad {
  double running = 0, waiting = 0, kvUsage = 0;
};

ServerLoad readLoad(int port) {
  ServerLoad load;
  httplib::Client client(kLoopbackHost, port);
  client.set_read_timeout(10, 0);
  httplib::Result response = client.Get("/metrics");
  if (!response || response->status != 200)
    return load;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  llvm::StringRef(response->body).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    auto [name, value] = line.rsplit(' ');
    double number = 0;
    if (line.startswith("#") || value.getAsDouble(number))
      continue;
    if (name.startswith("vllm:num_requests_running{"))
      load.running = number;
    else if (name.startswith("vllm:num_requests_waiting{"))
      load.waiting = number;
    else if (name.startswith("vllm:kv_cache_usage_perc{"))
      load.kvUsage = number;
  }
  return load;
}

/// One server binary in the hog cell.
struct HogCell {
  std::string server; ///< "span" or "baseline"
  std::string described;
  /// The short chats' TTFT (ms) idle and beside the hog; a sample without
  /// a first token within the timeout counts as the timeout.
  std::vector<double> idleMs, hogMs;
  int64_t idleMissing = 0, hogMissing = 0;
  ServerLoad hogLoad;
};

llvm::Expected<HogCell> runHogCell(const BenchArgs &args,
                                   const HogSettings &settings,
                                   const std::string &server,
                                   const std::string &binary) {
  HogCell cell;
  cell.server = server;
  std::vector<std::string> arguments = {binary, "serve", "--model",
                                        args.modelPath};
  if (args.threads > 0) {
    arguments.push_back("-t");
    arguments.push_back(std::to_string(args.threads));
  }
  cell.described = llvm::sys::path::filename(binary).str() + " " +
                   llvm::join(arguments.begin() + 1, arguments.end(), " ");
  auto process =
      ServerProcess::start("spanc serve (" + server + ")", arguments);
  if (!process)
    return process.takeError();
  const int port = (*process)->port();
  const int64_t timeout = settings.shortTimeoutSeconds;
  auto sample = [&](std::vector<double> &into, int64_t &missing) {
    for (int64_t index = 0; index < settings.shortRequests; ++index) {
      std::optional<double> ttft = shortChatTtftMs(port, timeout);
      if (!ttft)
        ++missing;
      into.push_back(ttft ? *ttft : double(timeout) * 1000);
    }
  };
  shortChatTtftMs(port, timeout); // warm-up: the chat template's blocks
  sample(cell.idleMs, cell.idleMissing);

  // The hog: sampled from the top token only, so every call runs long (a
  // greedy repeat would be one call).
  const std::string hogQuery =
      "query hog {\n  repeat(" + std::to_string(settings.hogCalls) +
      ") { gen(max_tokens = " + std::to_string(settings.hogTokens) +
      ", temperature = 0.8, top_k = 1, seed = 1) { user \"Tell me a long "
      "story about a lighthouse keeper.\" } }\n}\n";
  // The client lives on its thread's stack, as every httplib client here:
  // Debian's library may be built with members the header leaves out.
  std::thread hog([port, hogQuery] {
    httplib::Client client(kLoopbackHost, port);
    client.set_read_timeout(kRequestTimeoutSeconds, 0);
    client.Post("/v1/query", hogQuery, "text/plain");
  });
  const Clock::time_point hogStart = Clock::now();
  while (readLoad(port).running < 1 &&
         Clock::now() - hogStart < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  cell.hogLoad = readLoad(port);
  sample(cell.hogMs, cell.hogMissing);
  // Stopping the server cancels the hog, whose client then returns.
  process->reset();
  hog.join();
  return cell;
}

llvm::Error runHog(const BenchArgs &args) {
  auto settings = readHogSettings(args);
  if (!settings)
    return settings.takeError();
  std::vector<std::pair<std::string, std::string>> binaries = {
      {"span", spancBinary()}};
  if (!settings->baseline.empty())
    binaries.push_back({"baseline", settings->baseline});
  LoadSampler load;
  Clock::time_point begin = Clock::now();
  std::vector<HogCell> cells;
  for (const auto &[server, binary] : binaries) {
    llvm::errs() << "serve: hog + short request, " << server << " ...\n";
    auto cell = runHogCell(args, *settings, server, binary);
    if (!cell)
      return cell.takeError();
    cells.push_back(std::move(*cell));
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  std::string loadLine = load.stopAndDescribe();

  std::string tsv = "server\tphase\tsample\tttft_ms\tanswered\n";
  for (const HogCell &cell : cells)
    for (const auto &[phase, samples, missing] :
         {std::make_tuple("idle", &cell.idleMs, cell.idleMissing),
          std::make_tuple("hog", &cell.hogMs, cell.hogMissing)}) {
      (void)missing;
      for (size_t index = 0; index < samples->size(); ++index)
        tsv +=
            printed("%s\t%s\t%zu\t%.3f\t%d\n", cell.server.c_str(), phase,
                    index, (*samples)[index],
                    (*samples)[index] <
                            double(settings->shortTimeoutSeconds) * 1000 - 0.5
                        ? 1
                        : 0);
    }
  BenchArgs hogArgs = args;
  hogArgs.name = args.name + "-hog";
  if (auto error = writeTextFile(resultPath(hogArgs, ".tsv"), tsv))
    return error;

  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# spanc serve: a short request beside a hog\n\n"
      << "Generated by `spanc bench serve" << commandLine(args)
      << "` (bench/serve/ServeBench.cpp, cells=hog) on " << timestampNow()
      << " in " << llvm::format("%.0f", elapsed) << " s.\n\n"
      << "## Setup\n\n"
      << "- Model: `" << llvm::sys::path::filename(args.modelPath) << "`.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine
      << " (a shared machine: compare the rows of one run).\n"
      << "- The hog: one client's `POST /v1/query` of `repeat("
      << settings->hogCalls
      << ")` gens of `max_tokens = " << settings->hogTokens
      << "` (temperature 0.8, top_k 1: every call runs long), within "
         "every default limit of `spanc serve`.\n"
      << "- The short request: a streamed chat, `max_tokens = 8`; TTFT is "
         "client-side, from sending it to the first event with content. "
      << settings->shortRequests
      << " of them one after the other, on the idle server (after one "
         "warm-up), then beside the hog. A chat without a first token in "
      << settings->shortTimeoutSeconds
      << " s counts as that long (a lower bound) and is cancelled.\n"
      << "- Servers, each started fresh with its default options:\n";
  for (const HogCell &cell : cells)
    out << "  - `" << cell.server << "`: `" << cell.described << "`\n";
  out << "\n## Results\n\n"
      << "| server | short request | TTFT p50 (ms) | p99 (ms) | max (ms) | "
         "no first token | load beside the hog (running / waiting calls, "
         "KV usage) |\n"
      << "|---|---|---:|---:|---:|---:|---|\n";
  for (const HogCell &cell : cells) {
    for (bool beside : {false, true}) {
      const std::vector<double> &samples = beside ? cell.hogMs : cell.idleMs;
      out << "| " << cell.server << " | "
          << (beside ? "beside the hog" : "idle server") << " | "
          << formatMs(quantile(samples, 0.5)) << " | "
          << formatMs(quantile(samples, 0.99)) << " | "
          << formatMs(*std::max_element(samples.begin(), samples.end()))
          << " | " << (beside ? cell.hogMissing : cell.idleMissing) << " of "
          << samples.size() << " | "
          << (beside ? printed("%.0f / %.0f, %.3f", cell.hogLoad.running,
                               cell.hogLoad.waiting, cell.hogLoad.kvUsage)
                     : std::string("-"))
          << " |\n";
    }
  }
  out << "\nBeside the hog against idle (TTFT p50, p99):\n\n";
  for (const HogCell &cell : cells)
    out << "- " << cell.server << ": "
        << printed("%.1fx", quantile(cell.hogMs, 0.5) /
                                std::max(quantile(cell.idleMs, 0.5), 1e-3))
        << ", "
        << printed("%.1fx", quantile(cell.hogMs, 0.99) /
                                std::max(quantile(cell.idleMs, 0.99), 1e-3))
        << "\n";
  out << "\nRaw rows: [" << hogArgs.name << ".tsv](" << hogArgs.name
      << ".tsv); plot: " << hogArgs.name << ".png (bench/serve/plot_hog.py).\n";
  out.flush();

  llvm::SmallString<256> script(args.repoRoot);
  llvm::sys::path::append(script, "bench", "serve", "plot_hog.py");
  if (llvm::Error error = runPlotScript(
          script, {resultPath(hogArgs, ".tsv"), resultPath(hogArgs, ".png")})) {
    std::string reason = llvm::toString(std::move(error));
    llvm::errs() << hogArgs.name << ": no plot: " << reason << "\n";
    md += "\n(No plot this run: " + reason + ")\n";
  }
  if (llvm::Error error = writeTextFile(resultPath(hogArgs, ".md"), md))
    return error;
  llvm::outs() << md;
  return llvm::Error::success();
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
