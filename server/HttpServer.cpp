//===- HttpServer.cpp - spanc serve's HTTP front: routes, limits, streaming ==//

#include "server/HttpServer.h"

#include "server/ApiError.h"
#include "server/ClientSocket.h"
#include "server/Connections.h"
#include "server/SpnlExecute.h"
#include "server/StopStringFilter.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <ctime>
#include <functional>
#include <optional>

#include <strings.h>

namespace spanc::server {

namespace {

using nlohmann::json;

/// JSON text; invalid UTF-8 from a byte-level token becomes U+FFFD
/// instead of an exception.
std::string dump(const json &value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void sendError(httplib::Response &response, const ApiError &error) {
  response.status = error.status();
  if (error.status() == 429)
    response.set_header("Retry-After", "1");
  response.set_content(error.body(), "application/json");
}

void sendError(httplib::Response &response, llvm::Error error) {
  sendError(response, toApiError(std::move(error)));
}

/// Compares without an early exit, so timing does not reveal the key.
bool sameKey(const std::string &given, const std::string &expected) {
  if (given.size() != expected.size())
    return false;
  unsigned char difference = 0;
  for (size_t index = 0; index < given.size(); ++index)
    difference |= static_cast<unsigned char>(given[index] ^ expected[index]);
  return difference == 0;
}

std::string newId(const char *prefix) {
  static std::atomic<uint64_t> counter{0};
  return std::string(prefix) + std::to_string(std::time(nullptr)) + "-" +
         std::to_string(++counter);
}

const char *reasonName(const ChoiceResult &result, bool stoppedByString) {
  if (stoppedByString)
    return "stop";
  switch (result.reason) {
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  case FinishReason::Abort:
    return "abort";
  }
  return "stop";
}

/// Everything an answer needs besides the text.
struct Answer {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string id;
  std::string model;
  int64_t created = 0;
  int64_t n = 1;
  bool includeUsage = false;
  std::vector<uint64_t> promptTokens;
  std::shared_ptr<ResponseStream> stream;
  std::vector<StopStringFilter> filters;
  std::vector<bool> sentRole;
  /// The connection's socket, polled for the client going away (-1: not
  /// found, never polled).
  int clientSocket = -1;

  const char *object(bool chunk) const {
    if (endpoint == Endpoint::Completions)
      return "text_completion";
    return chunk ? "chat.completion.chunk" : "chat.completion";
  }

  json usage() const {
    uint64_t prompt = 0, completion = 0, cached = 0;
    for (uint64_t tokens : promptTokens)
      prompt += tokens;
    for (size_t choice = 0; choice < stream->numChoices(); ++choice) {
      const ChoiceResult &result = stream->result(choice);
      completion += result.stats.generatedTokens;
      // Each prompt counts once, as its first choice found it.
      if (choice % size_t(n) == 0)
        cached += result.stats.reusedTokens;
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  json envelope(bool chunk) const {
    return {{"id", id},
            {"object", object(chunk)},
            {"created", created},
            {"model", model},
            {"choices", json::array()}};
  }

  json choiceText(size_t index, const std::string &text, bool chunk,
                  const char *finishReason) const {
    json choice = {{"index", index}, {"logprobs", nullptr}};
    choice["finish_reason"] = finishReason ? json(finishReason) : json();
    if (endpoint == Endpoint::Completions) {
      choice["text"] = text;
    } else if (chunk) {
      choice["delta"] = json::object();
      if (!text.empty() || !finishReason)
        choice["delta"]["content"] = text;
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    }
    return choice;
  }
};

/// A token's text for logprobs: its bytes (a byte-level token may hold
/// part of a character; dump() then writes U+FFFD, and `bytes` the truth).
json tokenEntry(const model::Tokenizer &tokenizer, plan::TokenId token,
                float logprob) {
  std::string piece = tokenizer.tokenToPiece(token, false);
  json bytes = json::array();
  for (char c : piece)
    bytes.push_back(int(static_cast<unsigned char>(c)));
  return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

/// A choice's logprobs as OpenAI shapes them (chat: content entries;
/// completions: parallel lists), for the tokens within `text` (a stop
/// string cut off is not answered, nor are its tokens).
json logprobsJson(Endpoint endpoint, const ChoiceResult &result,
                  size_t textBytes, const model::Tokenizer &tokenizer) {
  json content = json::array();
  json tokens = json::array(), tokenLogprobs = json::array(),
       topLogprobs = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t index = 0; index < result.tokens.size() &&
                         index < result.logprobs.size() && offset < textBytes;
       ++index) {
    const plan::TokenId token = result.tokens[index];
    const sched::TokenLogprobs &figures = result.logprobs[index];
    json entry = tokenEntry(tokenizer, token, figures.logprob);
    if (endpoint == Endpoint::ChatCompletions) {
      json top = json::array();
      for (const auto &[other, logprob] : figures.top)
        top.push_back(tokenEntry(tokenizer, other, logprob));
      entry["top_logprobs"] = top;
      content.push_back(entry);
    } else {
      // The sampled token is always among them, as OpenAI answers.
      json top = json::object();
      for (const auto &[other, logprob] : figures.top)
        top[tokenizer.tokenToPiece(other, false)] = logprob;
      top[entry["token"].get<std::string>()] = figures.logprob;
      tokens.push_back(entry["token"]);
      tokenLogprobs.push_back(figures.logprob);
      topLogprobs.push_back(top);
      offsets.push_back(offset);
    }
    offset += entry["token"].get_ref<const std::string &>().size();
  }
  if (endpoint == Endpoint::ChatCompletions)
    return {{"content", content}, {"refusal", nullptr}};
  return {{"tokens", tokens},
          {"token_logprobs", tokenLogprobs},
          {"top_logprobs", topLogprobs},
          {"text_offset", offsets}};
}

/// How often a waiting HTTP thread looks at its client's socket: a client
/// gone is noticed within this, and its calls cancelled at the engine's
/// next step.
constexpr std::chrono::milliseconds kClientPollInterval(50);

/// The socket of the connection the calling thread answers.
int clientSocketOf(const httplib::Request &) {
  return ConnectionServer::currentSocket();
}

/// Waits until every choice of `stream` finished, handing on the text of
/// each as it comes. A client that goes away meanwhile cancels the request:
/// its calls then finish failed, and what is written after reaches nobody.
void waitForAll(
    ResponseStream &stream, int clientSocket,
    const std::function<void(size_t, const std::string &)> &onText) {
  ResponseStream::Update update;
  do {
    stream.take(update, kClientPollInterval);
    for (size_t choice = 0; choice < update.text.size(); ++choice)
      if (!update.text[choice].empty())
        onText(choice, update.text[choice]);
    if (!update.allDone && !stream.isCancelled() && clientClosed(clientSocket))
      stream.cancel();
  } while (!update.allDone);
}

/// One server-sent event.
bool writeEvent(httplib::DataSink &sink, const std::string &data) {
  std::string event = "data: " + data + "\n\n";
  return sink.write(event.data(), event.size());
}

/// Streams the answer as server-sent events; false when the client is
/// gone (the request is then cancelled by the releaser).
bool streamAnswer(Answer &answer, httplib::DataSink &sink) {
  ResponseStream::Update update;
  while (true) {
    answer.stream->take(update, kClientPollInterval);
    for (size_t choice = 0; choice < update.text.size(); ++choice) {
      StopStringFilter &filter = answer.filters[choice];
      std::string text = filter.push(update.text[choice]);
      if (update.finished[choice])
        text += filter.finish();
      json chunk = answer.envelope(true);
      if (answer.endpoint == Endpoint::ChatCompletions &&
          !answer.sentRole[choice]) {
        // The first delta names the role, as OpenAI's does.
        json first = answer.choiceText(choice, "", true, nullptr);
        first["delta"] = {{"role", "assistant"}, {"content", ""}};
        chunk["choices"].push_back(first);
        answer.sentRole[choice] = true;
        if (!writeEvent(sink, dump(chunk)))
          return false;
        chunk["choices"] = json::array();
      }
      if (!text.empty()) {
        chunk["choices"].push_back(
            answer.choiceText(choice, text, true, nullptr));
        if (!writeEvent(sink, dump(chunk)))
          return false;
        chunk["choices"] = json::array();
      }
      if (update.finished[choice]) {
        const ChoiceResult &result = answer.stream->result(choice);
        if (!result.succeeded) {
          ApiError error(500, "choice " + std::to_string(choice) +
                                  " failed: " + result.error);
          if (!writeEvent(sink, error.body()))
            return false;
        }
        chunk["choices"].push_back(answer.choiceText(
            choice, "", true, reasonName(result, filter.stopped())));
        if (!writeEvent(sink, dump(chunk)))
          return false;
      }
    }
    if (update.allDone) {
      if (answer.includeUsage) {
        json chunk = answer.envelope(true);
        chunk["usage"] = answer.usage();
        if (!writeEvent(sink, dump(chunk)))
          return false;
      }
      if (!writeEvent(sink, "[DONE]"))
        return false;
      sink.done();
      return true;
    }
    // Nothing may be written for a while (the request waits for room, or
    // a stop string holds text back): the socket tells whether anyone
    // still reads.
    if (!sink.is_writable() || clientClosed(answer.clientSocket))
      return false;
  }
}

/// A /v1/query/execute request in flight: the call behind each of spnl's
/// choices, and what its answer says besides the text.
struct SpnlExecution {
  SpnlAnswer answer;
  std::vector<plan::CallId> choices;
  /// Per choice: text held back while it ends inside a UTF-8 character
  /// (byte-level tokens split them), released with the next piece.
  std::vector<StopStringFilter> filters;
  std::shared_ptr<ResponseStream> stream;
  /// The connection's socket, polled for the client going away.
  int clientSocket = -1;
};

/// Streams spnl's choices as completion chunks, one event per HTTP chunk
/// (older spnl clients parse each chunk as one event); false when the
/// client is gone.
bool streamSpnl(SpnlExecution &execution, httplib::DataSink &sink) {
  ResponseStream::Update update;
  while (true) {
    execution.stream->take(update, kClientPollInterval);
    for (size_t choice = 0; choice < execution.choices.size(); ++choice) {
      plan::CallId call = execution.choices[choice];
      StopStringFilter &filter = execution.filters[choice];
      std::string text = filter.push(update.text[call]);
      if (update.finished[call])
        text += filter.finish();
      if (!text.empty() &&
          !writeEvent(sink, spnlChunk(execution.answer, choice, text, nullptr)))
        return false;
      if (!update.finished[call])
        continue;
      const ChoiceResult &result = execution.stream->result(call);
      if (!result.succeeded &&
          !writeEvent(sink, ApiError(500, "choice " + std::to_string(choice) +
                                              " failed: " + result.error)
                                .body()))
        return false;
      if (!writeEvent(sink, spnlChunk(execution.answer, choice, "",
                                      reasonName(result, false))))
        return false;
    }
    if (update.allDone) {
      if (!writeEvent(sink, "[DONE]"))
        return false;
      sink.done();
      return true;
    }
    if (!sink.is_writable() || clientClosed(execution.clientSocket))
      return false;
  }
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

  auto answer = std::make_shared<Answer>();
  answer->endpoint = endpoint;
  answer->id =
      newId(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-");
  answer->model = request->model;
  answer->created = int64_t(std::time(nullptr));
  answer->n = request->n;
  answer->includeUsage = request->includeUsage;
  answer->promptTokens = calls->promptTokens;
  const size_t numChoices = calls->calls.size();
  auto stream = engine.submit(std::move(*calls), arrival);
  if (!stream)
    return sendError(response, stream.takeError());
  answer->stream = *stream;
  answer->filters.assign(numChoices, StopStringFilter(request->stop));
  answer->sentRole.assign(numChoices, false);
  answer->clientSocket = clientSocketOf(httpRequest);

  if (request->stream) {
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        "text/event-stream",
        [answer](size_t, httplib::DataSink &sink) {
          return streamAnswer(*answer, sink);
        },
        [answer](bool success) {
          // Written to the end or not: a stream cut short is cancelled.
          if (!success)
            answer->stream->cancel();
        });
    return;
  }

  std::vector<std::string> texts(numChoices);
  waitForAll(*answer->stream, answer->clientSocket,
             [&](size_t choice, const std::string &text) {
               texts[choice] += answer->filters[choice].push(text);
             });
  json body = answer->envelope(false);
  for (size_t choice = 0; choice < numChoices; ++choice) {
    const ChoiceResult &result = answer->stream->result(choice);
    if (!result.succeeded)
      // Cancelled by a shutdown: the server, not the request, gave up.
      return sendError(response, ApiError(engine.isStopping() ? 503 : 500,
                                          "choice " + std::to_string(choice) +
                                              " failed: " + result.error));
    texts[choice] += answer->filters[choice].finish();
    json choiceJson = answer->choiceText(
        choice, texts[choice], false,
        reasonName(result, answer->filters[choice].stopped()));
    if (request->logprobs)
      choiceJson["logprobs"] =
          logprobsJson(endpoint, result, texts[choice].size(), tokenizer);
    body["choices"].push_back(std::move(choiceJson));
  }
  body["usage"] = answer->usage();
  response.set_content(dump(body), "application/json");
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
  // spnl sends JSON; a .span program is anything else.
  size_t first = httpBody.find_first_not_of(" \t\r\n");
  bool isJson = llvm::StringRef(httpRequest.get_header_value("Content-Type"))
                    .contains_insensitive("json") ||
                (first != std::string::npos && httpBody[first] == '{');
  auto plan = compileSpanQuery(httpBody, isJson, params, encoder,
                               options.spanQueryLimits);
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

  json queries = json::array();
  for (const plan::QueryPlan &query : plan->queries) {
    json results = json::array();
    for (const plan::ResultItem &item : query.results) {
      if (!item.call) {
        results.push_back({{"text", item.text}});
        continue;
      }
      json answer = {{"call", *item.call}, {"text", texts[*item.call]}};
      const ChoiceResult &result = stream->result(*item.call);
      if (!result.succeeded)
        answer["error"] = result.error;
      results.push_back(answer);
    }
    queries.push_back({{"name", query.name}, {"results", results}});
  }
  json callsJson = json::array();
  uint64_t prompt = 0, cached = 0, completion = 0;
  for (const plan::Call &call : plan->calls) {
    const ChoiceResult &result = stream->result(call.id);
    const sched::CallStats &stats = result.stats;
    prompt += stats.promptTokens;
    cached += stats.reusedTokens;
    completion += stats.generatedTokens;
    callsJson.push_back({{"id", call.id},
                         {"query", call.query},
                         {"location", call.location},
                         {"cache_only", call.cacheOnly},
                         {"succeeded", result.succeeded},
                         {"error", result.error},
                         {"finish_reason", reasonName(result, false)},
                         {"prompt_tokens", stats.promptTokens},
                         {"reused_tokens", stats.reusedTokens},
                         {"computed_tokens", stats.computedTokens},
                         {"relocated_tokens", stats.relocatedTokens},
                         {"generated_tokens", stats.generatedTokens},
                         {"preemptions", stats.preemptions},
                         {"queued_seconds", stats.queuedSeconds},
                         {"ttft_seconds", stats.ttftSeconds},
                         {"total_seconds", stats.totalSeconds}});
  }
  json body = {{"object", "span.query"},
               {"model", options.requestLimits.modelName},
               {"queries", queries},
               {"calls", callsJson},
               {"usage",
                {{"prompt_tokens", prompt},
                 {"completion_tokens", completion},
                 {"total_tokens", prompt + completion},
                 {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
  response.set_content(dump(body), "application/json");
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
  execution->answer.model = options.requestLimits.modelName;
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
  SpnlUsage usage;
  for (const plan::Call &call : plan->calls) {
    const ChoiceResult &result = execution->stream->result(call.id);
    if (!result.succeeded)
      return sendError(response, ApiError(engine.isStopping() ? 503 : 500,
                                          call.location + ": " + result.error));
    usage.promptTokens += result.stats.promptTokens;
    usage.completionTokens += result.stats.generatedTokens;
    usage.cachedTokens += result.stats.reusedTokens;
  }
  std::vector<std::string> texts;
  std::vector<const char *> reasons;
  for (plan::CallId call : execution->choices) {
    texts.push_back(outputs[call]);
    reasons.push_back(reasonName(execution->stream->result(call), false));
  }
  response.set_content(spnlWholeAnswer(execution->answer,
                                       readsAsCompletion(httpBody), texts,
                                       reasons, usage),
                       "application/json");
}

namespace {

/// Each path and the one method it answers (a GET's HEAD too, and
/// OPTIONS everywhere).
struct Route {
  const char *path;
  const char *method;

  /// The Allow header's value.
  std::string allowed() const {
    return std::string(method) +
           (std::string(method) == "GET" ? ", HEAD" : "") + ", OPTIONS";
  }
};
constexpr Route kRoutes[] = {
    {"/health", "GET"},
    {"/v1/models", "GET"},
    {"/metrics", "GET"},
    {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},
    {"/v1/query", "POST"},
    {"/v1/query/execute", "POST"},
};

const Route *findRoute(const std::string &path) {
  for (const Route &route : kRoutes)
    if (path == route.path)
      return &route;
  return nullptr;
}

bool isChunked(const httplib::Request &request) {
  return strcasecmp(request.get_header_value("Transfer-Encoding").c_str(),
                    "chunked") == 0;
}

/// Whether bytes of a body may follow the head.
bool mayHaveBody(const httplib::Request &request) {
  return request.has_header("Transfer-Encoding") ||
         (request.has_header("Content-Length") &&
          request.get_header_value("Content-Length") != "0");
}

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

/// Why `Authorization` does not carry `key`, or nothing when it does. The
/// scheme is case-insensitive and may be followed by several spaces (RFC
/// 7235, 2.1); the key itself is compared exactly.
std::optional<std::string> checkAuthorization(const httplib::Request &request,
                                              const std::string &key) {
  if (!request.has_header("Authorization"))
    return std::string("missing API key: send 'Authorization: Bearer KEY'");
  if (request.get_header_value_count("Authorization") != 1)
    return std::string("more than one Authorization header");
  const std::string header = request.get_header_value("Authorization");
  llvm::StringRef given = llvm::StringRef(header).trim(" \t");
  auto [scheme, credentials] = given.split(' ');
  if (!scheme.equals_insensitive("Bearer")) {
    // One word is the credentials without a scheme: never repeated.
    if (credentials.trim(' ').empty())
      return std::string("the Authorization header has no scheme: send "
                         "'Authorization: Bearer KEY'");
    // The scheme, not the credentials after it, is safe to repeat.
    std::string shown = scheme.take_front(32).str();
    for (char &c : shown)
      if (!std::isprint(static_cast<unsigned char>(c)))
        c = '?';
    return "the Authorization scheme '" + shown +
           "' is not supported: send 'Authorization: Bearer KEY'";
  }
  if (!sameKey(credentials.ltrim(' ').str(), key))
    return std::string("invalid API key");
  return std::nullopt;
}

/// The Content-Length header as a number: digits only, one value.
std::optional<uint64_t> contentLength(const httplib::Request &request) {
  if (request.get_header_value_count("Content-Length") != 1)
    return std::nullopt;
  const std::string text = request.get_header_value("Content-Length");
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(),
                   [](char c) { return std::isdigit((unsigned char)c); }))
    return std::nullopt;
  return std::stoull(text);
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
    json model = {{"id", options.requestLimits.modelName},
                  {"object", "model"},
                  {"created", int64_t(std::time(nullptr))},
                  {"owned_by", "spanc"},
                  {"max_model_len", options.promptLimits.contextLength}};
    json body = {{"object", "list"}, {"data", json::array({model})}};
    response.set_content(dump(body), "application/json");
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
}

} // namespace spanc::server
