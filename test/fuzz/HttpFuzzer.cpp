//===- HttpFuzzer.cpp - libFuzzer target: spanc serve's request handling --===//
//
// The input is what a client sends on one connection: request lines,
// headers, bodies (Content-Length or chunked, Expect: 100-continue) and
// any number of pipelined requests. It reaches a ConnectionServer (the
// poller's framing of heads and small bodies, the kept stream, httplib's
// parsing, the post-routing rule that closes a connection) over a
// socketpair handed to adoptConnection(), as if it had been accepted; the
// client half-closes after its last byte and reads until the server
// closes. The routes read bodies as HttpServer's do: in pieces, refused
// past a limit.
//
// What comes back must be a sequence of well-framed responses (a status
// line, headers, a body of the length announced or in chunks), nothing
// after one that says `Connection: close`, and it must end: the server
// closes every connection once its client has left.
//
//===----------------------------------------------------------------------===//

#include "server/Connections.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

using namespace spanc::server;

/// The bodies the routes accept, small so that the limit is reached.
constexpr size_t kMaxBody = 2048;
/// How long the client waits for the server to close (a hang past it is
/// a finding).
constexpr int kAnswerTimeoutMs = 20000;

[[noreturn]] void fail(const std::string &what, llvm::StringRef output) {
  llvm::errs() << "http fuzz: " << what << "\nresponses:\n" << output << "\n";
  std::abort();
}

struct Server {
  ConnectionServer server;
  std::thread thread;

  static ConnectionLimits limits() {
    ConnectionLimits limits;
    limits.workers = 2;
    limits.maxConnections = 8;
    // A request the client cut short ends at its end of file; these only
    // bound what a bug would make the server wait for.
    limits.headerTimeout = std::chrono::milliseconds(5000);
    limits.bodyTimeout = std::chrono::milliseconds(5000);
    limits.idleTimeout = std::chrono::milliseconds(5000);
    limits.writeTimeout = std::chrono::milliseconds(5000);
    limits.maxHeadBytes = 1024;
    limits.maxRequestsPerConnection = 8;
    return limits;
  }

  Server() : server(limits()) {
    server.set_payload_max_length(kMaxBody);
    // HttpServer::routes' framing rules, which decide what of the stream
    // is the next request: a body that will not be read ends the
    // connection after the answer.
    server.set_pre_routing_handler(
        [](const httplib::Request &request, httplib::Response &response) {
          const bool chunked =
              strcasecmp(request.get_header_value("Transfer-Encoding").c_str(),
                         "chunked") == 0;
          const bool mayHaveBody =
              request.has_header("Transfer-Encoding") ||
              (request.has_header("Content-Length") &&
               request.get_header_value("Content-Length") != "0");
          const std::string length = request.get_header_value("Content-Length");
          const bool refused =
              (request.has_header("Transfer-Encoding") &&
               (!chunked || request.has_header("Content-Length"))) ||
              (request.has_header("Content-Length") &&
               (request.get_header_value_count("Content-Length") != 1 ||
                length.empty() || length.size() > 18 ||
                length.find_first_not_of("0123456789") != std::string::npos ||
                std::stoull(length) > kMaxBody));
          if (refused) {
            response.status = 400;
            response.set_header("Connection", "close");
            ConnectionServer::closeAfterResponse();
            return httplib::Server::HandlerResponse::Handled;
          }
          if (request.method == "GET" && mayHaveBody)
            ConnectionServer::closeAfterResponse();
          return httplib::Server::HandlerResponse::Unhandled;
        });
    server.Get("/health", [](const httplib::Request &request,
                             httplib::Response &response) {
      response.set_header("X-Headers", std::to_string(request.headers.size()));
    });
    // As HttpServer's POST routes: the body in pieces, never past the
    // limit; no length and no chunks is no body.
    server.Post("/read", [](const httplib::Request &request,
                            httplib::Response &response,
                            const httplib::ContentReader &reader) {
      std::string body;
      if (!request.has_header("Content-Length") &&
          !request.has_header("Transfer-Encoding"))
        return;
      bool tooLarge = false;
      bool read = reader([&](const char *data, size_t length) {
        if (length > kMaxBody - body.size()) {
          tooLarge = true;
          return false;
        }
        body.append(data, length);
        return true;
      });
      if (!read) {
        response.status = tooLarge ? 413 : 400;
        response.set_header("Connection", "close");
        ConnectionServer::closeAfterResponse();
        return;
      }
      response.set_header("X-Body-Bytes", std::to_string(body.size()));
    });
    // httplib reads the whole body itself (up to its payload limit).
    server.Post("/whole", [](const httplib::Request &request,
                             httplib::Response &response) {
      response.set_header("X-Body-Bytes", std::to_string(request.body.size()));
    });
    auto port = server.listenOn("127.0.0.1", 0);
    if (!port) {
      llvm::errs() << llvm::toString(port.takeError()) << "\n";
      std::abort();
    }
    thread = std::thread([this] { server.serveConnections(); });
  }
};

/// Checks that `output` is whole responses, none after a close.
void checkResponses(llvm::StringRef output) {
  llvm::StringRef rest = output;
  while (!rest.empty()) {
    if (!rest.startswith("HTTP/1.1 ") || rest.size() < 12)
      fail("a response does not start with a status line", output);
    unsigned status = 0;
    if (rest.substr(9, 3).getAsInteger(10, status) || status < 100 ||
        status > 599)
      fail("a bad status", output);
    size_t headEnd = rest.find("\r\n\r\n");
    if (headEnd == llvm::StringRef::npos)
      fail("a response head does not end", output);
    llvm::StringRef head = rest.take_front(headEnd + 2);
    rest = rest.drop_front(headEnd + 4);
    bool closes = false, chunked = false;
    size_t length = 0;
    llvm::StringRef lines = head;
    lines = lines.split("\r\n").second; // the status line
    while (!lines.empty()) {
      auto [line, more] = lines.split("\r\n");
      lines = more;
      auto [name, value] = line.split(':');
      value = value.trim(" ");
      if (name.equals_insensitive("connection") &&
          value.equals_insensitive("close"))
        closes = true;
      else if (name.equals_insensitive("transfer-encoding"))
        chunked = value.equals_insensitive("chunked");
      else if (name.equals_insensitive("content-length") &&
               value.getAsInteger(10, length))
        fail("a bad Content-Length in a response", output);
    }
    if (status == 100) {
      if (closes)
        fail("100 Continue closes", output);
      continue;
    }
    if (chunked) {
      while (true) {
        size_t lineEnd = rest.find("\r\n");
        unsigned long long size = 0;
        if (lineEnd == llvm::StringRef::npos ||
            rest.take_front(lineEnd).getAsInteger(16, size) ||
            rest.size() < lineEnd + 2 + size + 2)
          fail("a response chunk is cut", output);
        rest = rest.drop_front(lineEnd + 2 + size + 2);
        if (size == 0)
          break;
      }
    } else {
      if (rest.size() < length)
        fail("a response body is cut", output);
      rest = rest.drop_front(length);
    }
    if (closes && !rest.empty())
      fail("bytes after a response that closes the connection", output);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Server *server = new Server;
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0)
    std::abort();
  server->server.adoptConnection(sockets[0]);
  const int client = sockets[1];
  fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK);

  // Sends the input and reads the answers at once (a response may fill the
  // socket's buffer before the input is all sent).
  std::string output;
  size_t sent = 0;
  bool sending = true;
  if (size == 0) {
    shutdown(client, SHUT_WR);
    sending = false;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(kAnswerTimeoutMs);
  while (true) {
    pollfd entry{client, short(POLLIN | (sending ? POLLOUT : 0)), 0};
    int ready = poll(&entry, 1, 1000);
    if (ready < 0 && errno != EINTR)
      std::abort();
    if (std::chrono::steady_clock::now() > deadline)
      fail("the server did not close the connection", output);
    if (sending && (entry.revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t written = send(client, data + sent, size - sent, MSG_NOSIGNAL);
      if (written > 0)
        sent += size_t(written);
      // The server may close before it read everything (a refusal).
      if (sent == size || (written < 0 && errno != EAGAIN && errno != EINTR)) {
        shutdown(client, SHUT_WR);
        sending = false;
      }
    }
    if (entry.revents & (POLLIN | POLLERR | POLLHUP)) {
      char buffer[16384];
      ssize_t received = recv(client, buffer, sizeof buffer, 0);
      if (received > 0)
        output.append(buffer, size_t(received));
      else if (received == 0 || (errno != EAGAIN && errno != EINTR))
        break;
    }
  }
  close(client);
  // And it closes its side soon after: a connection still open once its
  // client left is a leak (a socket and a poll entry per request).
  // (10 s: the machine is shared, the server's threads may wait for a
  // core.)
  const auto closeBy =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server->server.numConnections() != 0) {
    if (std::chrono::steady_clock::now() > closeBy)
      fail("the server kept the connection after its client left", output);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // To see what an input gets: SPANC_HTTP_FUZZ_PRINT=1 http_fuzzer FILE.
  static const bool print = std::getenv("SPANC_HTTP_FUZZ_PRINT") != nullptr;
  if (print)
    llvm::errs() << output << "\n";
  checkResponses(output);
  return 0;
}
