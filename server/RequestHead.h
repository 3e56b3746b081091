//===- RequestHead.h - What a request's head alone decides ----------------===//
//
// The checks spanc serve makes before it reads any of a body
// (docs/SERVING.md): the routes and the one method each
// answers, the framing (Content-Length digits only, chunked or nothing) and
// the API key. Answering them is HttpServer's; these only read headers.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_REQUESTHEAD_H
#define SPANC_SERVER_REQUESTHEAD_H

#include <cstdint>
#include <optional>
#include <string>

namespace httplib {
struct Request;
} // namespace httplib

namespace spanc::server {

/// A path and the one method it answers (a GET's HEAD too, and OPTIONS
/// everywhere).
struct Route {
  const char *path;
  const char *method;

  /// The Allow header's value.
  std::string allowed() const;
};

/// The route of `path`, or null for an unknown one.
const Route *findRoute(const std::string &path);

/// Whether the body comes in chunks.
bool isChunked(const httplib::Request &request);

/// Whether bytes of a body may follow the head.
bool mayHaveBody(const httplib::Request &request);

/// The Content-Length header as a number: digits only, one value.
std::optional<uint64_t> contentLength(const httplib::Request &request);

/// Why `Authorization` does not carry `key`, or nothing when it does. The
/// scheme is case-insensitive and may be followed by several spaces (RFC
/// 7235, 2.1); the key itself is compared exactly, in time that does not
/// depend on where it differs.
std::optional<std::string> checkAuthorization(const httplib::Request &request,
                                              const std::string &key);

} // namespace spanc::server

#endif // SPANC_SERVER_REQUESTHEAD_H
