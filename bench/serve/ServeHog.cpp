//===- ServeHog.cpp - spanc bench serve: a short request beside a hog -----===//
//
// The `cells=hog` cell of `spanc bench serve` (issue 25, point 7): a short
// streamed chat's time to first token on an idle server and beside one
// client's /v1/query of many long gens, per server binary.
//
//===----------------------------------------------------------------------===//

#include "bench/serve/ServeHog.h"

#include "bench/common/ModelSession.h"
#include "bench/common/Report.h"
#include "bench/common/ServerProcess.h"

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
#include <optional>
#include <thread>

namespace spanc::bench {

std::string formatMs(double value) { return printed("%.0f", value); }

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

llvm::Error failure(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str().c_str());
}

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

} // namespace

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

} // namespace spanc::bench
