//===- RequestHead.cpp - What a request's head alone decides --------------===//

#include "server/RequestHead.h"

#include "llvm/ADT/StringRef.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>

#include <strings.h>

namespace spanc::server {

namespace {

constexpr Route kRoutes[] = {
    {"/health", "GET"},
    {"/v1/models", "GET"},
    {"/metrics", "GET"},
    {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},
    {"/v1/query", "POST"},
    {"/v1/query/execute", "POST"},
    {"/v1/query/plan", "POST"},
};

/// Compares without an early exit, so timing does not reveal the key.
bool sameKey(const std::string &given, const std::string &expected) {
  if (given.size() != expected.size())
    return false;
  unsigned char difference = 0;
  for (size_t index = 0; index < given.size(); ++index)
    difference |= static_cast<unsigned char>(given[index] ^ expected[index]);
  return difference == 0;
}

} // namespace

std::string Route::allowed() const {
  return std::string(method) + (std::string(method) == "GET" ? ", HEAD" : "") +
         ", OPTIONS";
}

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

bool mayHaveBody(const httplib::Request &request) {
  return request.has_header("Transfer-Encoding") ||
         (request.has_header("Content-Length") &&
          request.get_header_value("Content-Length") != "0");
}

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

} // namespace spanc::server
