//===- HttpServer.cpp - spanc serve's HTTP front: routes, limits, handlers ===//
//-===//

#include "server/HttpServer.h"

#include "plan/PlanPrinter.h"
#include "runtime/kv/KvCacheManager.h"
#include "server/AnswerStreaming.h"
#include "server/ApiError.h"
#include "server/Connections.h"
#include "server/OpenAiResponse.h"
#include "server/RequestHead.h"
#include "server/ResponseJson.h"
#include "server/SpanQueryResponse.h"
#include "server/SpnlExecute.h"
#include "server/StopStringFilter.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <ctime>
#include <functional>
#include <optional>

namespace spanc::server {

namespace {

using nlohmann::json;

void sendError(httplib::Response &response, const ApiError &error) {
  response.status = error.status();
  if (error.status() == 429)
    response.set_header("Retry-After", "1");
  response.set_content(error.body(), "application/json");
}

void sendError(httplib::Response &response, llvm::Error error) {
  sendError(response, toApiError(std::move(error)));
}

std::string newId(const char *prefix) {
  static std::atomic<uint64_t> counter{0};
  return std::string(prefix) + std::to_string(std::time(nullptr)) + "-" +
         std::to_string(++counter);
}

/// The socket of the connection the calling thread answers.
int clientSocketOf(const httplib::Request &) {
  return ConnectionServer::currentSocket();
}

} // namespace

HttpServer::HttpServer(Engine &engine, ServerMetrics &metrics,
                       const plan::MessageEncoder &encoder,
                       const model::Tokenizer &tokenizer, HttpOptions options)
    : engine(engine), metrics(metrics), encoder(encoder), tokenizer(tokenizer),
      options(std::move(options)) {
  ConnectionLimits limits;
  limits.workers = this->options.httpThreads;
  limits.maxConnections = this->options.maxConnections;
  limits.headerTimeout = this->options.headerTimeout;
  limits.bodyTimeout = this->options.bodyTimeout;
  server = std::make_unique<ConnectionServer>(limits);
  routes();
}

HttpServer::~HttpServer() = default;

llvm::Expected<int> HttpServer::bind(const std::string &host, int port) {
  return server->listenOn(host, port);
}

void HttpServer::serve() { server->serveConnections(); }

void HttpServer::stop() { server->stopServing(); }

void HttpServer::completions(Endpoint endpoint,
                             const httplib::Request &httpRequest,
                             const std::string &httpBody,
                             httplib::Response &response) {
  const Clock::time_point arrival = Clock::now();
  auto request =
      parseCompletionRequest(httpBody, endpoint, options.requestLimits);
  if (!request)
    return sendError(response, request.takeError());
  auto calls = buildCalls(*request, encoder, tokenizer, options.promptLimits);
  if (!calls)
    return sendError(response, calls.takeError());

  auto execution = std::make_shared<OpenAiExecution>();
  OpenAiAnswer &answer = execution->answer;
  answer.endpoint = endpoint;
  answer.id =
      newId(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-");
  answer.model = request->model;
  answer.created = int64_t(std::time(nullptr));
  execution->n = size_t(request->n);
  execution->includeUsage = request->includeUsage;
  execution->promptTokens = calls->promptTokens;
  const size_t numChoices = calls->calls.size();
  auto stream = engine.submit(std::move(*calls), arrival);
  if (!stream)
    return sendError(response, stream.takeError());
  execution->stream = *stream;
  execution->filters.assign(numChoices, StopStringFilter(request->stop));
  execution->sentRole.assign(numChoices, false);
  execution->clientSocket = clientSocketOf(httpRequest);

  if (request->stream) {
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        "text/event-stream",
        [execution](size_t, httplib::DataSink &sink) {
          return streamOpenAi(*execution, sink);
        },
        [execution](bool success) {
          // Written to the end or not: a stream cut short is cancelled.
          if (!success)
            execution->stream->cancel();
        });
    return;
  }

  std::vector<OpenAiChoice> choices(numChoices);
  waitForAll(*execution->stream, execution->clientSocket,
             [&](size_t choice, const std::string &text) {
               choices[choice].text += execution->filters[choice].push(text);
             });
  for (size_t choice = 0; choice < numChoices; ++choice) {
    const ChoiceResult &result = execution->stream->result(choice);
    if (!result.succeeded)
      // Cancelled by a shutdown: the server, not the request, gave up.
      return sendError(response, ApiError(engine.isStopping() ? 503 : 500,
                                          "choice " + std::to_string(choice) +
                                              " failed: " + result.error));
    StopStringFilter &filter = execution->filters[choice];
    choices[choice].text += filter.finish();
    choices[choice].finishReason = finishReasonName(result, filter.stopped());
    if (request->logprobs)
      choices[choice].logprobs = &result;
  }
  TokenUsage usage =
      openAiUsage(execution->promptTokens, *execution->stream, execution->n);
  response.set_content(openAiWholeAnswer(answer, choices, usage, tokenizer),
                       "application/json");
}

/// spnl sends JSON; a .span program is anything else.
static bool isSpnlJson(const httplib::Request &httpRequest,
                       const std::string &httpBody) {
  size_t first = httpBody.find_first_not_of(" \t\r\n");
  return llvm::StringRef(httpRequest.get_header_value("Content-Type"))
             .contains_insensitive("json") ||
         (first != std::string::npos && httpBody[first] == '{');
}

void HttpServer::queryPlan(const httplib::Request &httpRequest,
                           const std::string &httpBody,
                           httplib::Response &response) {
  if (!options.planLayout)
    return sendError(response, ApiError(404, "this server lays out no plans"));
  auto plan = compileSpanQuery(httpBody, isSpnlJson(httpRequest, httpBody), {},
                               encoder, options.spanQueryLimits);
  if (!plan)
    return sendError(response, plan.takeError());
  const PlanLayout &layout = *options.planLayout;
  plan::PlanPrintOptions printOptions;
  printOptions.blockSize = layout.blockSize;
  std::string text;
  llvm::raw_string_ostream out(text);
  plan::printPlan(
      *plan, printOptions,
      [&](const plan::Call &, llvm::ArrayRef<kv::Segment> segments,
          llvm::raw_ostream &os) {
        kv::printCallLayout(segments, layout.hasher, layout.cacheMode,
                            layout.spanOptions, layout.blockSize, os);
      },
      out);
  out.flush();
  response.set_content(text, "text/plain; charset=utf-8");
}

void HttpServer::spanQuery(const httplib::Request &httpRequest,
                           const std::string &httpBody,
                           httplib::Response &response) {
  const Clock::time_point arrival = Clock::now();
  // --set NAME=VALUE as ?set=NAME=VALUE, repeatable.
  std::vector<std::pair<std::string, std::string>> params;
  for (size_t index = 0; index < httpRequest.get_param_value_count("set");
       ++index) {
    std::string text = httpRequest.get_param_value("set", index);
    size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0)
      return sendError(
          response,
          ApiError(400, "set takes NAME=VALUE, got '" + text + "'", "set"));
    params.emplace_back(text.substr(0, equals), text.substr(equals + 1));
  }
  auto plan = compileSpanQuery(httpBody, isSpnlJson(httpRequest, httpBody),
                               params, encoder, options.spanQueryLimits);
  if (!plan)
    return sendError(response, plan.takeError());
  RequestCalls calls;
  calls.calls = plan->calls;
  auto submitted = engine.submit(std::move(calls), arrival);
  if (!submitted)
    return sendError(response, submitted.takeError());
  std::shared_ptr<ResponseStream> stream = *submitted;

  std::vector<std::string> texts(plan->calls.size());
  waitForAll(
      *stream, clientSocketOf(httpRequest),
      [&](size_t call, const std::string &text) { texts[call] += text; });
  response.set_content(spanQueryAnswer(*plan, texts, *stream,
                                       options.requestLimits.models.primary()),
                       "application/json");
}

void HttpServer::queryExecute(const httplib::Request &httpRequest,
                              const std::string &httpBody,
                              httplib::Response &response) {
  const Clock::time_point arrival = Clock::now();
  auto stream = parseStreamParam(httpRequest.has_param("stream"),
                                 httpRequest.get_param_value("stream"));
  if (!stream)
    return sendError(response, stream.takeError());
  // spnl sends its JSON as text/plain: the body is spnl JSON whatever its
  // type says.
  auto plan = compileSpanQuery(httpBody, /*isJson=*/true, {}, encoder,
                               options.spanQueryLimits);
  if (!plan)
    return sendError(response, plan.takeError());
  auto execution = std::make_shared<SpnlExecution>();
  execution->answer.id = newId("cmpl-");
  execution->answer.model = options.requestLimits.models.primary();
  execution->answer.created = int64_t(std::time(nullptr));
  execution->choices = spnlChoices(*plan);
  execution->filters.assign(execution->choices.size(), StopStringFilter({}));
  RequestCalls calls;
  calls.calls = plan->calls;
  auto submitted = engine.submit(std::move(calls), arrival);
  if (!submitted)
    return sendError(response, submitted.takeError());
  execution->stream = *submitted;
  execution->clientSocket = clientSocketOf(httpRequest);

  if (*stream) {
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        "text/event-stream",
        [execution](size_t, httplib::DataSink &sink) {
          return streamSpnl(*execution, sink);
        },
        [execution](bool success) {
          // Written to the end or not: a stream cut short is cancelled.
          if (!success)
            execution->stream->cancel();
        });
    return;
  }

  std::vector<std::string> outputs(plan->calls.size());
  waitForAll(
      *execution->stream, execution->clientSocket,
      [&](size_t call, const std::string &text) { outputs[call] += text; });
  TokenUsage usage;
  for (const plan::Call &call : plan->calls) {
    const ChoiceResult &result = execution->stream->result(call.id);
    if (!result.succeeded)
      return sendError(response, ApiError(engine.isStopping() ? 503 : 500,
                                          call.location + ": " + result.error));
    usage.addCall(result.stats);
  }
  std::vector<std::string> texts;
  std::vector<const char *> reasons;
  for (plan::CallId call : execution->choices) {
    texts.push_back(outputs[call]);
    reasons.push_back(finishReasonName(execution->stream->result(call)));
  }
  response.set_content(spnlWholeAnswer(execution->answer,
                                       readsAsCompletion(httpBody), texts,
                                       reasons, usage),
                       "application/json");
}

namespace {

/// Answers before the body was read: a connection with a body still in it
/// cannot carry another request, so it closes after this answer.
void refuseUnread(const httplib::Request &request, httplib::Response &response,
                  const ApiError &error) {
  sendError(response, error);
  if (mayHaveBody(request)) {
    response.set_header("Connection", "close");
    ConnectionServer::closeAfterResponse();
  }
}

} // namespace

void HttpServer::routes() {
  httplib::Server &http = *server;
  http.set_payload_max_length(options.maxBodyBytes);

  // Everything that needs no body is checked before any of it is read:
  // the framing, the key, the path and the method.
  http.set_pre_routing_handler([this](const httplib::Request &request,
                                      httplib::Response &response) {
    const bool hasLength = request.has_header("Content-Length");
    if (request.has_header("Transfer-Encoding")) {
      if (!isChunked(request)) {
        refuseUnread(
            request, response,
            ApiError(501, "Transfer-Encoding '" +
                              request.get_header_value("Transfer-Encoding") +
                              "' is not supported; send the body "
                              "chunked or with Content-Length"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (hasLength) {
        refuseUnread(request, response,
                     ApiError(400, "a request may not have both "
                                   "Content-Length and Transfer-Encoding"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (hasLength) {
      std::optional<uint64_t> length = contentLength(request);
      if (!length) {
        refuseUnread(
            request, response,
            ApiError(400, "invalid Content-Length '" +
                              request.get_header_value("Content-Length") +
                              "': one decimal number of bytes"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (*length > options.maxBodyBytes) {
        refuseUnread(request, response,
                     ApiError(413, "the body of " + std::to_string(*length) +
                                       " bytes is larger than the server's "
                                       "limit of " +
                                       std::to_string(options.maxBodyBytes) +
                                       " bytes (--max-body)"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }

    // OPTIONS says which methods a path answers (RFC 9110, 9.3.7), and
    // "OPTIONS *" those of the server, with no key: a CORS preflight never
    // carries one. No CORS header is sent, so browsers stay out.
    const Route *route = findRoute(request.path);
    if (request.method == "OPTIONS" && (route || request.path == "*")) {
      // 200 with no body: a 204 may not carry the Content-Length httplib
      // always writes.
      response.status = 200;
      response.set_header("Allow", route ? route->allowed()
                                         : "GET, HEAD, POST, OPTIONS");
      if (mayHaveBody(request)) {
        response.set_header("Connection", "close");
        ConnectionServer::closeAfterResponse();
      }
      return httplib::Server::HandlerResponse::Handled;
    }

    // The key guards everything but the liveness probe.
    if (!options.apiKey.empty() && request.path != "/health") {
      std::optional<std::string> refusal =
          checkAuthorization(request, options.apiKey);
      if (refusal) {
        refuseUnread(request, response, ApiError(401, *refusal));
        response.set_header("WWW-Authenticate", "Bearer");
        return httplib::Server::HandlerResponse::Handled;
      }
    }

    // Each path answers its own method; the others get 405 and Allow.
    if (!route) {
      refuseUnread(request, response,
                   ApiError(404, "no such endpoint: " + request.path));
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string method = route->method;
    const bool allowed = request.method == method ||
                         (method == "GET" && request.method == "HEAD");
    if (!allowed) {
      refuseUnread(request, response,
                   ApiError(405, "method " + request.method +
                                     " is not allowed on " + route->path +
                                     "; use " + method));
      response.set_header("Allow", route->allowed());
      return httplib::Server::HandlerResponse::Handled;
    }
    // httplib reads no body on a GET: what follows its head is not the
    // next request, so the connection ends after the answer.
    if (method == "GET" && mayHaveBody(request))
      ConnectionServer::closeAfterResponse();
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Errors httplib raises itself (a malformed request line or header) in
  // OpenAI's shape too.
  http.set_error_handler([this](const httplib::Request &,
                                httplib::Response &response) {
    if (!response.body.empty())
      return;
    if (ConnectionServer::currentReadState() == ReadState::TimedOut)
      return sendError(response,
                       ApiError(408, "the request did not arrive in time"));
    if (response.status == 413)
      return sendError(response,
                       ApiError(413, "the body is larger than the server's "
                                     "limit of " +
                                         std::to_string(options.maxBodyBytes) +
                                         " bytes (--max-body)"));
    sendError(response, ApiError(response.status,
                                 "the request failed (HTTP " +
                                     std::to_string(response.status) + ")"));
  });
  http.set_exception_handler([](const httplib::Request &,
                                httplib::Response &response,
                                std::exception_ptr exception) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(exception);
    } catch (const std::exception &error) {
      what += std::string(": ") + error.what();
    } catch (...) {
    }
    sendError(response, ApiError(500, what));
  });

  http.Get("/health",
           [](const httplib::Request &, httplib::Response &response) {
             response.status = 200;
           });
  http.Get("/v1/models", [this](const httplib::Request &,
                                httplib::Response &response) {
    // One entry per served name, as vLLM lists its --served-model-name.
    json models = json::array();
    for (const std::string &name : options.requestLimits.models.all())
      models.push_back({{"id", name},
                        {"object", "model"},
                        {"created", int64_t(std::time(nullptr))},
                        {"owned_by", "spanc"},
                        {"max_model_len", options.promptLimits.contextLength}});
    json body = {{"object", "list"}, {"data", models}};
    response.set_content(dumpJson(body), "application/json");
  });
  http.Get("/metrics",
           [this](const httplib::Request &, httplib::Response &response) {
             response.set_content(metrics.render(),
                                  "text/plain; version=0.0.4; charset=utf-8");
           });

  // A POST's body is read here, in pieces, never past --max-body (a
  // chunked body announces no length: it is cut off as it passes the
  // limit, and the rest is not read).
  using BodyHandler = std::function<void(
      const httplib::Request &, const std::string &, httplib::Response &)>;
  auto post = [&](const char *path, BodyHandler handler) {
    http.Post(path, [this, handler](const httplib::Request &request,
                                    httplib::Response &response,
                                    const httplib::ContentReader &reader) {
      std::string body;
      // Neither a length nor chunks: a request without a body (RFC 9112,
      // 6.3), not one that lasts until the client closes.
      if (!request.has_header("Content-Length") && !isChunked(request))
        return handler(request, body, response);
      bool tooLarge = false;
      bool read = reader([&](const char *data, size_t length) {
        if (length > options.maxBodyBytes - body.size()) {
          tooLarge = true;
          return false;
        }
        body.append(data, length);
        return true;
      });
      if (read)
        return handler(request, body, response);
      response.set_header("Connection", "close");
      ConnectionServer::closeAfterResponse();
      if (tooLarge)
        return sendError(
            response, ApiError(413, "the body is larger than the server's "
                                    "limit of " +
                                        std::to_string(options.maxBodyBytes) +
                                        " bytes (--max-body)"));
      switch (ConnectionServer::currentReadState()) {
      case ReadState::TimedOut:
        return sendError(response,
                         ApiError(408,
                                  "the body did not arrive within the server's "
                                  "--body-timeout"));
      case ReadState::Stopped:
        return sendError(response,
                         ApiError(503, "the server is shutting down"));
      default:
        return sendError(response,
                         ApiError(400, "the body ended early or its chunks "
                                       "are malformed"));
      }
    });
  };
  post("/v1/chat/completions",
       [this](const httplib::Request &request, const std::string &body,
              httplib::Response &response) {
         completions(Endpoint::ChatCompletions, request, body, response);
       });
  post("/v1/completions",
       [this](const httplib::Request &request, const std::string &body,
              httplib::Response &response) {
         completions(Endpoint::Completions, request, body, response);
       });
  post("/v1/query",
       [this](const httplib::Request &request, const std::string &body,
              httplib::Response &response) {
         spanQuery(request, body, response);
       });
  post("/v1/query/execute",
       [this](const httplib::Request &request, const std::string &body,
              httplib::Response &response) {
         queryExecute(request, body, response);
       });
  post("/v1/query/plan",
       [this](const httplib::Request &request, const std::string &body,
              httplib::Response &response) {
         queryPlan(request, body, response);
       });
}

} // namespace spanc::server
