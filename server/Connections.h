//===- Connections.h - spanc serve's connections: deadlines, pipelining ---===//
//
// httplib 0.11 gives each connection a pool thread from accept to close, so
// 64 clients trickling a header byte a second held all 64 threads (nobody
// was answered, not even /health) and shutdown waited for them forever; and
// it reads each request of a keep-alive connection through a new buffered
// stream, so requests sent back to back were lost with the first one's
// buffer. ConnectionServer keeps httplib's request parsing, routing and
// responses (Server::process_request) and owns the connections itself
// (docs/SERVING.md):
//
// - One poller thread accepts and reads every connection that has no whole
//   request head (request line and headers) yet: a head must arrive within
//   `headerTimeout` of its first byte (408 after) and fit `maxHeadBytes`
//   (431 beyond); an idle keep-alive connection is closed after
//   `idleTimeout`. A body announced with a length of at most 64 KiB is
//   read there too, within `bodyTimeout` of the head's end (408 after).
//   Only a whole request takes a pool thread (`workers`), so clients that
//   send slowly cost a socket each, never a thread (a larger or chunked
//   body is read by the pool thread, within `bodyTimeout`).
// - A pool thread runs the request over the connection's ConnectionStream:
//   the bytes the poller read, then the socket, every read bounded by
//   `bodyTimeout` from the end of the head and woken at once by shutdown.
// - The stream lives as long as the connection: bytes read past one request
//   are the next one's, so pipelined requests are answered, in order.
// - A response with `Connection: close` (a body refused unread: 413, 401,
//   405...) or a 408/431/414/400 for a malformed request ends the
//   connection: the server stops sending, reads and drops at most
//   kLingerBytes for at most kLingerTime (so the client reads the answer
//   rather than a reset), then closes.
// - stopServing() closes the listening socket and every connection still
//   sending its request, wakes the reads in progress, and
//   serveConnections() returns once the requests being answered end.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_CONNECTIONS_H
#define SPANC_SERVER_CONNECTIONS_H

#include "llvm/Support/Error.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spanc::server {

struct ConnectionLimits {
  /// Threads answering requests (--http-threads).
  size_t workers = 64;
  /// Connections open at once, idle, reading or answered; one more is
  /// answered 503 and closed (--max-connections).
  size_t maxConnections = 512;
  /// From a request's first byte to the end of its head (--header-timeout).
  std::chrono::milliseconds headerTimeout{10000};
  /// From the end of a request's head to the end of its body
  /// (--body-timeout).
  std::chrono::milliseconds bodyTimeout{30000};
  /// How long a connection may wait for its next request.
  std::chrono::milliseconds idleTimeout{5000};
  /// How long one write may wait for the client to read.
  std::chrono::milliseconds writeTimeout{30000};
  /// The request line and headers together.
  size_t maxHeadBytes = 64 * 1024;
  /// Requests one connection may carry; the last is answered with
  /// `Connection: close`.
  size_t maxRequestsPerConnection = 1000;
};

/// What the stream of a connection knows about its reads.
enum class ReadState { Open, TimedOut, Stopped, Closed };

/// An httplib::Stream over one connection's socket, kept across its
/// requests: reads take the bytes already buffered first, then wait for the
/// socket until a deadline or shutdown.
class ConnectionStream final : public httplib::Stream {
public:
  ConnectionStream(int socket, int stopEvent,
                   std::chrono::milliseconds writeTimeout);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char *data, size_t size) override;
  ssize_t write(const char *data, size_t size) override;
  void get_remote_ip_and_port(std::string &ip, int &port) const override;
  void get_local_ip_and_port(std::string &ip, int &port) const override;
  int socket() const override { return fd; }

  /// Reads from now on fail once `deadline` passes.
  void setReadDeadline(std::chrono::steady_clock::time_point deadline) {
    readDeadline = deadline;
  }
  ReadState readState() const { return state; }
  void resetReadState() { state = ReadState::Open; }

  /// Reads what the socket holds now without waiting (the poller's read):
  /// the bytes read, 0 at end of file, -1 on an error, -2 when nothing is
  /// there.
  ssize_t fill(size_t atMost);
  /// The bytes read and not yet consumed.
  llvm::StringRef buffered() const {
    return llvm::StringRef(buffer).drop_front(consumed);
  }

private:
  /// Waits until the socket is readable; false at the deadline or shutdown
  /// (recorded in `state`).
  bool waitReadable() const;

  int fd;
  int stopEvent;
  std::chrono::milliseconds writeTimeout;
  std::chrono::steady_clock::time_point readDeadline;
  mutable ReadState state = ReadState::Open;
  std::string buffer;
  size_t consumed = 0;
};

class ConnectionServer : public httplib::Server {
public:
  explicit ConnectionServer(ConnectionLimits limits);
  ~ConnectionServer() override;

  /// Listens on `host`:`port` (0: any free port); returns the port.
  llvm::Expected<int> listenOn(const std::string &host, int port);
  /// Serves until stopServing(); blocks, and returns once every request
  /// being answered ended and every connection is closed.
  void serveConnections();
  /// Stops accepting and reading; safe from any thread, before or during
  /// serveConnections().
  void stopServing();
  /// Serves `fd`, a connected stream socket (one end of a socketpair), as
  /// if it had been accepted: how the HTTP fuzz target and tests drive the
  /// request handling without the network. Takes ownership; safe from any
  /// thread while serveConnections() runs.
  void adoptConnection(int fd);

  /// On a pool thread answering a request: the socket of its connection
  /// (-1 elsewhere), to notice a client that left.
  static int currentSocket();
  /// On a pool thread answering a request: how its stream's reads ended
  /// (a body cut by its deadline, or by shutdown).
  static ReadState currentReadState();
  /// On a pool thread answering a request: the connection closes after
  /// this response (its body was not read).
  static void closeAfterResponse();

  /// Connections open now (accepted and not yet closed).
  size_t numConnections() const { return openConnections.load(); }

private:
  struct Connection;
  using ConnectionPtr = std::unique_ptr<Connection>;

  void pollerLoop();
  void workerLoop();
  /// Answers the request whose head `connection` holds; whether the
  /// connection may carry another.
  bool answer(Connection &connection);
  /// Hands a connection whose request was answered back to the poller.
  void giveBack(ConnectionPtr connection);
  void dispatch(ConnectionPtr connection);
  void close(ConnectionPtr connection);
  void wakePoller();

  /// The connection the calling pool thread answers (null elsewhere).
  static thread_local Connection *current;

  ConnectionLimits limits;
  int listenSocket = -1;
  /// Readable once stopServing() ran (never reset): wakes every wait.
  int stopEvent = -1;
  /// Readable when the poller has connections to take back.
  int wakeEvent = -1;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> openConnections{0};

  std::mutex mutex;
  std::condition_variable workAvailable;
  std::deque<ConnectionPtr> ready;     ///< whole heads, for the pool
  std::vector<ConnectionPtr> returned; ///< answered, for the poller
  std::vector<int> adopted;            ///< adoptConnection's, for the poller
  std::vector<std::thread> workers;
};

} // namespace spanc::server

#endif // SPANC_SERVER_CONNECTIONS_H
