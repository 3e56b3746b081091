//===- Connections.cpp - spanc serve's connections: deadlines, pipelining -===//

#include "server/Connections.h"

#include "server/ApiError.h"
#include "server/ClientSocket.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spanc::server {

namespace {

using Clock = std::chrono::steady_clock;

/// What a connection that ends reads and drops so that its client reads
/// the answer rather than a reset (closing a socket with unread input
/// resets it).
constexpr size_t kLingerBytes = 1 << 20;
constexpr std::chrono::milliseconds kLingerTime(1000);
/// What one read from a socket takes at most.
constexpr size_t kReadChunk = 16 * 1024;
/// A body announced with a length of at most this is read by the poller
/// too, so a client that sends it slowly holds no thread either.
constexpr size_t kGatherBodyBytes = 64 * 1024;

/// Milliseconds from now to `deadline` for poll(), at least 0 and at most
/// a minute (a far deadline is polled again).
int millisecondsUntil(Clock::time_point deadline) {
  Clock::time_point now = Clock::now();
  if (deadline <= now)
    return 0;
  auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  return int(std::min<int64_t>(wait.count(), 60000));
}

bool wouldBlock() {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/// The numeric address and port of a socket's end, as httplib gives them.
void addressOf(int fd, bool peer, std::string &ip, int &port) {
  sockaddr_storage address;
  socklen_t length = sizeof address;
  auto *raw = reinterpret_cast<sockaddr *>(&address);
  if ((peer ? getpeername(fd, raw, &length) : getsockname(fd, raw, &length)) !=
      0)
    return;
  char host[NI_MAXHOST];
  if (getnameinfo(raw, length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) !=
      0)
    return;
  ip = host;
  if (address.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in &>(address).sin_port);
  else if (address.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6 &>(address).sin6_port);
}

/// A whole response for a request the poller refuses, written without
/// waiting: what the socket takes now is all it gets.
void sendRefusal(int fd, int status, const char *reason,
                 const std::string &message) {
  std::string body = ApiError(status, message).body();
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                         "\r\nContent-Type: application/json\r\n"
                         "Content-Length: " +
                         std::to_string(body.size()) +
                         "\r\nConnection: close\r\n\r\n" + body;
  ssize_t sent =
      send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)sent;
}

std::string seconds(std::chrono::milliseconds duration) {
  double value = double(duration.count()) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

} // namespace

//===----------------------------------------------------------------------===//
// ConnectionStream
//===----------------------------------------------------------------------===//

ConnectionStream::ConnectionStream(int socket, int stopEvent,
                                   std::chrono::milliseconds writeTimeout)
    : fd(socket), stopEvent(stopEvent), writeTimeout(writeTimeout),
      readDeadline(Clock::time_point::max()) {}

bool ConnectionStream::waitReadable() const {
  while (true) {
    if (Clock::now() >= readDeadline) {
      state = ReadState::TimedOut;
      return false;
    }
    pollfd entries[2] = {{fd, POLLIN, 0}, {stopEvent, POLLIN, 0}};
    int ready = poll(entries, 2, millisecondsUntil(readDeadline));
    if (ready < 0) {
      if (errno == EINTR)
        continue;
      state = ReadState::Closed;
      return false;
    }
    if (entries[1].revents & POLLIN) {
      state = ReadState::Stopped;
      return false;
    }
    // Readable, at end of file or in error: recv says which.
    if (entries[0].revents)
      return true;
  }
}

bool ConnectionStream::is_readable() const {
  if (consumed < buffer.size())
    return true;
  return state == ReadState::Open && waitReadable();
}

ssize_t ConnectionStream::read(char *data, size_t size) {
  if (consumed == buffer.size()) {
    if (state != ReadState::Open)
      return -1;
    buffer.clear();
    consumed = 0;
    while (true) {
      if (!waitReadable())
        return -1;
      buffer.resize(kReadChunk);
      ssize_t received = recv(fd, buffer.data(), kReadChunk, MSG_DONTWAIT);
      if (received > 0) {
        buffer.resize(size_t(received));
        break;
      }
      buffer.clear();
      if (received < 0 && wouldBlock())
        continue;
      state = ReadState::Closed;
      return received == 0 ? 0 : -1;
    }
  }
  size_t count = std::min(size, buffer.size() - consumed);
  std::memcpy(data, buffer.data() + consumed, count);
  consumed += count;
  return ssize_t(count);
}

ssize_t ConnectionStream::fill(size_t atMost) {
  if (consumed == buffer.size()) {
    buffer.clear();
    consumed = 0;
  } else if (consumed >= kReadChunk) {
    buffer.erase(0, consumed);
    consumed = 0;
  }
  if (atMost == 0)
    return -2;
  size_t before = buffer.size();
  buffer.resize(before + atMost);
  ssize_t received = recv(fd, &buffer[before], atMost, MSG_DONTWAIT);
  buffer.resize(before + size_t(std::max<ssize_t>(received, 0)));
  if (received < 0)
    return wouldBlock() ? -2 : -1;
  return received;
}

ssize_t ConnectionStream::write(const char *data, size_t size) {
  const Clock::time_point deadline = Clock::now() + writeTimeout;
  while (true) {
    ssize_t sent = send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0)
      return sent;
    if (!wouldBlock())
      return -1;
    pollfd entry{fd, POLLOUT, 0};
    int ready = poll(&entry, 1, millisecondsUntil(deadline));
    if (ready == 0 && Clock::now() >= deadline)
      return -1;
    if (ready > 0 && (entry.revents & (POLLERR | POLLHUP | POLLNVAL)))
      return -1;
  }
}

bool ConnectionStream::is_writable() const {
  pollfd entry{fd, POLLOUT, 0};
  int ready;
  do
    ready = poll(&entry, 1, int(writeTimeout.count()));
  while (ready < 0 && errno == EINTR);
  return ready > 0 && (entry.revents & POLLOUT) && !clientClosed(fd);
}

void ConnectionStream::get_remote_ip_and_port(std::string &ip,
                                              int &port) const {
  addressOf(fd, /*peer=*/true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string &ip, int &port) const {
  addressOf(fd, /*peer=*/false, ip, port);
}

//===----------------------------------------------------------------------===//
// ConnectionServer
//===----------------------------------------------------------------------===//

struct ConnectionServer::Connection {
  Connection(int fd, int stopEvent, std::chrono::milliseconds writeTimeout)
      : fd(fd), stream(fd, stopEvent, writeTimeout) {}

  int fd;
  ConnectionStream stream;
  /// Reading a request head, or reading and dropping before the close.
  bool lingering = false;
  /// No byte of the next request yet.
  bool idle = true;
  /// When the poller gives up on it.
  Clock::time_point deadline;
  /// How much of the buffered bytes was searched for the head's end.
  size_t scanned = 0;
  /// The bytes of the head and of the body the poller waits for (0: the
  /// head is not whole yet).
  size_t wanted = 0;
  size_t lingered = 0;
  size_t requests = 0;
  bool closeAfter = false;

  /// Forgets the request before (its bytes were consumed).
  void startRequest() {
    scanned = 0;
    wanted = 0;
  }

  /// Whether the buffered bytes hold what a pool thread should start
  /// from: a whole head, and its body when its length is announced and
  /// small. Sets `wanted` once the head is whole.
  bool hasRequest() {
    llvm::StringRef bytes = stream.buffered();
    if (!wanted) {
      size_t from = scanned >= 3 ? scanned - 3 : 0;
      scanned = bytes.size();
      size_t end = bytes.find("\r\n\r\n", from);
      if (end == llvm::StringRef::npos)
        return false;
      wanted = end + 4 + smallBodyLength(bytes.take_front(end + 2));
    }
    return bytes.size() >= wanted;
  }

  /// The length a head announces for its body when it is one plain
  /// Content-Length of at most kGatherBodyBytes; else 0 (no body, chunks,
  /// 100-continue, a large or malformed one: the pool thread reads or
  /// refuses it).
  static size_t smallBodyLength(llvm::StringRef head) {
    size_t length = 0;
    bool found = false;
    while (!head.empty()) {
      auto [line, rest] = head.split("\r\n");
      head = rest;
      auto [name, value] = line.split(':');
      // A client that expects 100 Continue sends its body only after it
      // (httplib answers it once a pool thread has the request).
      if (name.equals_insensitive("transfer-encoding") ||
          name.equals_insensitive("expect"))
        return 0;
      if (!name.equals_insensitive("content-length"))
        continue;
      value = value.trim(" \t");
      if (found || value.empty() || value.size() > 9 ||
          value.find_first_not_of("0123456789") != llvm::StringRef::npos)
        return 0;
      found = true;
      value.getAsInteger(10, length);
    }
    return length <= kGatherBodyBytes ? length : 0;
  }
};

thread_local ConnectionServer::Connection *ConnectionServer::current = nullptr;

ConnectionServer::ConnectionServer(ConnectionLimits limits) : limits(limits) {
  stopEvent = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  wakeEvent = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // A response that ends its connection says so, and nothing else about
  // keeping it.
  set_post_routing_handler(
      [](const httplib::Request &request, httplib::Response &response) {
        Connection *connection = current;
        if (!connection)
          return;
        bool closing = connection->closeAfter ||
                       response.get_header_value("Connection") == "close" ||
                       response.status == 408 || response.status == 413 ||
                       response.status == 414 || response.status == 431 ||
                       (response.status == 400 && request.method.empty()) ||
                       connection->stream.readState() != ReadState::Open;
        if (!closing)
          return;
        connection->closeAfter = true;
        response.headers.erase("Keep-Alive");
        response.headers.erase("Connection");
        response.set_header("Connection", "close");
      });
}

ConnectionServer::~ConnectionServer() {
  if (listenSocket >= 0)
    ::close(listenSocket);
  ::close(stopEvent);
  ::close(wakeEvent);
}

llvm::Expected<int> ConnectionServer::listenOn(const std::string &host,
                                               int port) {
  int bound = -1;
  if (port == 0)
    bound = bind_to_any_port(host);
  else if (bind_to_port(host, port))
    bound = port;
  if (bound > 0) {
    listenSocket = svr_sock_.exchange(INVALID_SOCKET);
    // httplib listens with a backlog of 5: more clients than that
    // connecting at once would overflow it and some be reset.
    if (::listen(listenSocket, SOMAXCONN) == 0 &&
        fcntl(listenSocket, F_SETFL,
              fcntl(listenSocket, F_GETFL) | O_NONBLOCK) == 0) {
      // httplib's chunked writer stops once this is invalid: it holds the
      // listening socket's number until shutdown.
      svr_sock_ = listenSocket;
      return bound;
    }
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "cannot listen on %s:%d (in use, or not an "
                                 "address of this machine)",
                                 host.c_str(), port);
}

int ConnectionServer::currentSocket() { return current ? current->fd : -1; }

ReadState ConnectionServer::currentReadState() {
  return current ? current->stream.readState() : ReadState::Open;
}

void ConnectionServer::closeAfterResponse() {
  if (current)
    current->closeAfter = true;
}

void ConnectionServer::wakePoller() {
  uint64_t one = 1;
  ssize_t written = ::write(wakeEvent, &one, sizeof one);
  (void)written;
}

void ConnectionServer::adoptConnection(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  {
    std::lock_guard<std::mutex> lock(mutex);
    adopted.push_back(fd);
  }
  wakePoller();
}

void ConnectionServer::stopServing() {
  stopping = true;
  uint64_t one = 1;
  ssize_t written = ::write(stopEvent, &one, sizeof one);
  (void)written;
  std::lock_guard<std::mutex> lock(mutex);
  workAvailable.notify_all();
}

void ConnectionServer::close(ConnectionPtr connection) {
  ::close(connection->fd);
  --openConnections;
}

void ConnectionServer::dispatch(ConnectionPtr connection) {
  std::lock_guard<std::mutex> lock(mutex);
  ready.push_back(std::move(connection));
  workAvailable.notify_one();
}

void ConnectionServer::giveBack(ConnectionPtr connection) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    returned.push_back(std::move(connection));
  }
  wakePoller();
}

void ConnectionServer::serveConnections() {
  if (listenSocket < 0)
    return;
  for (size_t index = 0; index < std::max<size_t>(limits.workers, 1); ++index)
    workers.emplace_back([this] { workerLoop(); });
  pollerLoop();
  stopServing();
  for (std::thread &worker : workers)
    worker.join();
  workers.clear();
  std::lock_guard<std::mutex> lock(mutex);
  for (ConnectionPtr &connection : returned)
    close(std::move(connection));
  returned.clear();
  for (ConnectionPtr &connection : ready)
    close(std::move(connection));
  ready.clear();
}

void ConnectionServer::pollerLoop() {
  std::vector<ConnectionPtr> parked;
  std::vector<pollfd> entries;
  Clock::time_point acceptPausedUntil;

  // Ends a connection with a refusal the poller writes itself.
  auto refuse = [&](Connection &connection, int status, const char *reason,
                    const std::string &message) {
    sendRefusal(connection.fd, status, reason, message);
    shutdown(connection.fd, SHUT_WR);
    connection.lingering = true;
    connection.deadline = Clock::now() + kLingerTime;
  };
  // A connection whose next request may be complete already (pipelined).
  auto park = [&](ConnectionPtr connection) {
    if (!connection->lingering && connection->hasRequest())
      return dispatch(std::move(connection));
    parked.push_back(std::move(connection));
  };

  while (!stopping) {
    // The connections the pool answered: wait for their next request.
    // The wake-up is drained before the lists are taken: a connection
    // handed back after the drain signals again, so the poll below returns
    // at once. (Drained after, a connection handed back between the two
    // waited in `returned`, off the poll set, for the next accept or a
    // minute; found by the HTTP fuzz target, test/fuzz/LOG.md.)
    uint64_t count;
    ssize_t drained = ::read(wakeEvent, &count, sizeof count);
    (void)drained;
    std::vector<ConnectionPtr> back;
    std::vector<int> newSockets;
    {
      std::lock_guard<std::mutex> lock(mutex);
      back.swap(returned);
      newSockets.swap(adopted);
    }
    for (ConnectionPtr &connection : back) {
      connection->startRequest();
      connection->idle = connection->stream.buffered().empty();
      connection->deadline =
          Clock::now() + (connection->lingering ? kLingerTime
                          : connection->idle    ? limits.idleTimeout
                                                : limits.headerTimeout);
      park(std::move(connection));
    }
    for (int fd : newSockets) {
      ++openConnections;
      auto connection =
          std::make_unique<Connection>(fd, stopEvent, limits.writeTimeout);
      connection->deadline = Clock::now() + limits.headerTimeout;
      parked.push_back(std::move(connection));
    }

    entries.clear();
    entries.push_back({stopEvent, POLLIN, 0});
    entries.push_back({wakeEvent, POLLIN, 0});
    const bool accepting = Clock::now() >= acceptPausedUntil;
    entries.push_back({accepting ? listenSocket : -1, POLLIN, 0});
    Clock::time_point wakeAt = Clock::now() + std::chrono::seconds(60);
    if (!accepting)
      wakeAt = std::min(wakeAt, acceptPausedUntil);
    for (const ConnectionPtr &connection : parked) {
      entries.push_back({connection->fd, POLLIN, 0});
      wakeAt = std::min(wakeAt, connection->deadline);
    }
    int ready = poll(entries.data(), entries.size(), millisecondsUntil(wakeAt));
    if (ready < 0 && errno != EINTR)
      break;
    if (stopping || (entries[0].revents & POLLIN))
      break;
    const Clock::time_point now = Clock::now();

    if (entries[2].revents & POLLIN) {
      while (true) {
        int fd = accept4(listenSocket, nullptr, nullptr,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
              errno == ENOMEM)
            // Out of descriptors: let connections close before the next.
            acceptPausedUntil = now + std::chrono::milliseconds(50);
          break;
        }
        ++openConnections;
        auto connection =
            std::make_unique<Connection>(fd, stopEvent, limits.writeTimeout);
        connection->deadline = now + limits.headerTimeout;
        if (openConnections > limits.maxConnections)
          refuse(*connection, 503, "Service Unavailable",
                 "the server has " + std::to_string(limits.maxConnections) +
                     " connections open (--max-connections); try again");
        parked.push_back(std::move(connection));
      }
    }

    // parked[i] is entries[3 + i]; connections accepted above come after.
    const size_t polled = entries.size() - 3;
    for (size_t index = 0; index < parked.size(); ++index) {
      Connection &connection = *parked[index];
      short events = index < polled ? entries[3 + index].revents : 0;
      bool done = false;
      if (connection.lingering) {
        if (events) {
          char discard[kReadChunk];
          ssize_t received = recv(connection.fd, discard, sizeof discard, 0);
          if (received > 0)
            connection.lingered += size_t(received);
          done = received == 0 || (received < 0 && !wouldBlock()) ||
                 connection.lingered > kLingerBytes;
        }
        if (done || now >= connection.deadline) {
          close(std::move(parked[index]));
          continue;
        }
        continue;
      }
      if (events) {
        const size_t limit =
            connection.wanted ? connection.wanted : limits.maxHeadBytes + 1;
        size_t room =
            limit - std::min(limit - 1, connection.stream.buffered().size());
        ssize_t received = connection.stream.fill(room);
        if (received == 0 || received == -1) {
          // The client left (or the socket failed) before a whole request.
          close(std::move(parked[index]));
          continue;
        }
        if (received > 0 && connection.idle) {
          connection.idle = false;
          connection.deadline = now + limits.headerTimeout;
        }
        const bool hadHead = connection.wanted != 0;
        if (connection.hasRequest()) {
          dispatch(std::move(parked[index]));
          continue;
        }
        if (!hadHead && connection.wanted)
          // The head is whole, its small body still coming.
          connection.deadline = now + limits.bodyTimeout;
        if (!connection.wanted &&
            connection.stream.buffered().size() > limits.maxHeadBytes) {
          refuse(connection, 431, "Request Header Fields Too Large",
                 "the request line and headers are larger than " +
                     std::to_string(limits.maxHeadBytes) + " bytes");
          continue;
        }
      }
      if (now >= connection.deadline) {
        if (connection.idle) {
          close(std::move(parked[index]));
          continue;
        }
        refuse(connection, 408, "Request Timeout",
               connection.wanted
                   ? "the body did not arrive within " +
                         seconds(limits.bodyTimeout) + " s (--body-timeout)"
                   : "the request line and headers did not arrive within " +
                         seconds(limits.headerTimeout) +
                         " s (--header-timeout)");
      }
    }
    parked.erase(std::remove(parked.begin(), parked.end(), nullptr),
                 parked.end());
  }

  // Shutdown: no new connection, and none still sending its request.
  int fd = svr_sock_.exchange(INVALID_SOCKET);
  if (fd >= 0) {
    ::close(fd);
    listenSocket = -1;
  }
  for (ConnectionPtr &connection : parked)
    close(std::move(connection));
  std::lock_guard<std::mutex> lock(mutex);
  for (int adoptedSocket : adopted)
    ::close(adoptedSocket);
  adopted.clear();
}

void ConnectionServer::workerLoop() {
  while (true) {
    ConnectionPtr connection;
    {
      std::unique_lock<std::mutex> lock(mutex);
      workAvailable.wait(lock, [&] { return !ready.empty() || stopping; });
      if (ready.empty())
        return;
      connection = std::move(ready.front());
      ready.pop_front();
    }
    if (stopping) {
      sendRefusal(connection->fd, 503, "Service Unavailable",
                  "the server is shutting down");
      close(std::move(connection));
      continue;
    }
    if (answer(*connection) && !stopping)
      giveBack(std::move(connection));
    else if (!stopping && connection->stream.readState() != ReadState::Closed) {
      // Its input may hold what was never read (a refused body).
      shutdown(connection->fd, SHUT_WR);
      connection->lingering = true;
      giveBack(std::move(connection));
    } else {
      close(std::move(connection));
    }
  }
}

bool ConnectionServer::answer(Connection &connection) {
  current = &connection;
  connection.closeAfter = false;
  connection.stream.resetReadState();
  // The head is buffered whole; the body has its own deadline.
  connection.stream.setReadDeadline(Clock::now() + limits.headerTimeout);
  const bool last = ++connection.requests >= limits.maxRequestsPerConnection;
  bool connectionClosed = false;
  bool written = process_request(
      connection.stream, last, connectionClosed, [&](httplib::Request &) {
        connection.stream.setReadDeadline(Clock::now() + limits.bodyTimeout);
      });
  current = nullptr;
  return written && !connectionClosed && !last && !connection.closeAfter &&
         connection.stream.readState() == ReadState::Open;
}

} // namespace spanc::server
