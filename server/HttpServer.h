//===- HttpServer.h - spanc serve's HTTP front: routes, limits, streaming -===//
//
// The HTTP threads of spanc serve (docs/SERVING.md), on
// cpp-httplib's thread pool: the routes and their handlers. Each request is
// checked (API key, body size, method: RequestHead; JSON, limits) and
// answered with an OpenAI-style error when it fails; a completion request
// is turned into calls (PromptBuilder) and submitted to the Engine, whose
// ResponseStream the thread then follows (AnswerStreaming): the whole
// answer, or server-sent events ending in `data: [DONE]`. A client that
// goes away mid-stream cancels its calls. The bodies are written by
// OpenAiResponse, SpanQueryResponse and SpnlExecute. /metrics renders
// ServerMetrics; /health and /v1/models answer at once. POST /v1/query
// compiles a span program (SpanQuery) and submits its whole plan; POST
// /v1/query/execute does so for spnl's client (SpnlExecute); POST
// /v1/query/plan compiles one and answers its calls' KV block layout as
// `spanc compile --emit=plan` prints it, hashes as the cache's, for a
// router (deploy/router/span_router.py) to score replicas by. Connections
// (deadlines, pipelining, shutdown) are ConnectionServer's; every check that
// needs no body (key, path, method, Content-Length) runs before the body is
// read, and a body is read in pieces up to --max-body, chunked or not.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_HTTPSERVER_H
#define SPANC_SERVER_HTTPSERVER_H

#include "plan/MessageEncoder.h"
#include "runtime/kv/BlockHash.h"
#include "runtime/kv/SpanLayout.h"
#include "runtime/model/Tokenizer.h"
#include "server/CompletionRequest.h"
#include "server/Engine.h"
#include "server/Metrics.h"
#include "server/PromptBuilder.h"
#include "server/SpanQuery.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace spanc::server {

class ConnectionServer;

/// How the engine lays a request's calls out in KV blocks, for POST
/// /v1/query/plan: its block hasher, cache mode, span options and block
/// size.
struct PlanLayout {
  kv::BlockHasher hasher;
  kv::CacheMode cacheMode = kv::CacheMode::Span;
  kv::SpanOptions spanOptions;
  unsigned blockSize = 16;
};

struct HttpOptions {
  /// Required as `Authorization: Bearer KEY` on every endpoint but
  /// /health; empty: no key.
  std::string apiKey;
  /// Bodies larger than this get 413, whether their length is announced
  /// or they come in chunks (then as soon as the chunks pass it).
  size_t maxBodyBytes = 1 << 20;
  /// Threads answering requests (each held for a request's whole answer,
  /// from the end of its head).
  size_t httpThreads = 64;
  /// Connections open at once (Connections.h).
  size_t maxConnections = 512;
  /// From a request's first byte to the end of its headers (408 after).
  std::chrono::milliseconds headerTimeout{10000};
  /// From the end of a request's headers to the end of its body (408).
  std::chrono::milliseconds bodyTimeout{30000};
  RequestLimits requestLimits;
  PromptLimits promptLimits;
  SpanQueryLimits spanQueryLimits;
  /// Unset: POST /v1/query/plan answers 404.
  std::optional<PlanLayout> planLayout;
};

class HttpServer {
public:
  HttpServer(Engine &engine, ServerMetrics &metrics,
             const plan::MessageEncoder &encoder,
             const model::Tokenizer &tokenizer, HttpOptions options);
  ~HttpServer();

  /// Binds `host`:`port` (0: any free port); returns the port bound.
  llvm::Expected<int> bind(const std::string &host, int port);
  /// Serves until stop(); blocks.
  void serve();
  /// Stops accepting; serve() returns once the requests being served end.
  void stop();

private:
  void routes();
  void completions(Endpoint endpoint, const httplib::Request &request,
                   const std::string &body, httplib::Response &response);
  /// POST /v1/query: a span program, its answers and per-call statistics.
  void spanQuery(const httplib::Request &request, const std::string &body,
                 httplib::Response &response);
  /// POST /v1/query/execute: an spnl query as spnl's client sends it,
  /// answered as it reads answers (SpnlExecute.h).
  void queryExecute(const httplib::Request &request, const std::string &body,
                    httplib::Response &response);
  /// POST /v1/query/plan: a span program's KV block layout, not run.
  void queryPlan(const httplib::Request &request, const std::string &body,
                 httplib::Response &response);

  Engine &engine;
  ServerMetrics &metrics;
  const plan::MessageEncoder &encoder;
  const model::Tokenizer &tokenizer;
  HttpOptions options;
  std::unique_ptr<ConnectionServer> server;
};

} // namespace spanc::server

#endif // SPANC_SERVER_HTTPSERVER_H
