//===- ConnectionsTest.cpp - spanc serve's connections, without a model ---===//
//
// ConnectionServer over loopback with a few plain routes: requests
// pipelined on one connection are answered in order; clients that trickle
// their headers hold a socket, not a thread, and get 408 at the header
// deadline; a head past its limit gets 431, a connection past the limit
// 503; a body that stalls ends at its deadline; stopping closes the
// connections still sending and returns at once; 2000 malformed and cut
// requests (seeded, from pieces of real ones) leave it answering. Deadlines
// are a few hundred milliseconds; every wait is bounded.
//
//===----------------------------------------------------------------------===//

#include "server/Connections.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spanc::server {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// A ConnectionServer serving on a thread, with GET /ping, GET /slow (it
/// takes 200 ms) and POST /echo (reads the body through httplib).
class Serving {
public:
  explicit Serving(ConnectionLimits limits) : server(limits) {
    server.Get("/ping", [](const httplib::Request &, httplib::Response &r) {
      r.set_content("pong", "text/plain");
    });
    server.Get("/slow", [](const httplib::Request &, httplib::Response &r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      r.set_content("slow", "text/plain");
    });
    server.Post("/echo",
                [](const httplib::Request &request, httplib::Response &r) {
                  r.set_content(request.body, "text/plain");
                });
    auto bound = server.listenOn("127.0.0.1", 0);
    EXPECT_TRUE(bool(bound));
    port = bound ? *bound : 0;
    thread = std::thread([this] { server.serveConnections(); });
  }
  ~Serving() { stop(); }

  /// Stops and returns how long serveConnections() took to return.
  double stop() {
    if (!thread.joinable())
      return 0;
    Clock::time_point start = Clock::now();
    server.stopServing();
    thread.join();
    return secondsSince(start);
  }

  int connect() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(
        ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address),
        0);
    return fd;
  }

  ConnectionServer server;
  int port = 0;
  std::thread thread;
};

void sendAll(int fd, const std::string &data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t written =
        send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (written <= 0)
      return;
    sent += size_t(written);
  }
}

/// Everything the server sends until it closes, or until `seconds` pass.
std::string readUntilClosed(int fd, double seconds = 5) {
  std::string data;
  Clock::time_point start = Clock::now();
  while (secondsSince(start) < seconds) {
    pollfd entry{fd, POLLIN, 0};
    if (poll(&entry, 1, 50) <= 0)
      continue;
    char buffer[4096];
    ssize_t received = recv(fd, buffer, sizeof buffer, 0);
    if (received <= 0)
      break;
    data.append(buffer, size_t(received));
  }
  return data;
}

size_t count(const std::string &text, const std::string &part) {
  size_t found = 0;
  for (size_t at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1))
    ++found;
  return found;
}

ConnectionLimits fastLimits() {
  ConnectionLimits limits;
  limits.workers = 2;
  limits.headerTimeout = std::chrono::milliseconds(300);
  limits.bodyTimeout = std::chrono::milliseconds(300);
  limits.idleTimeout = std::chrono::milliseconds(300);
  return limits;
}

TEST(ConnectionServer, AnswersRequestsPipelinedOnOneConnectionInOrder) {
  Serving serving(fastLimits());
  int fd = serving.connect();
  // One write, six requests, a body among them: httplib alone answered
  // the first and lost the rest with its read buffer.
  sendAll(fd, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
              "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
              "hello"
              "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
              "GET /nosuch HTTP/1.1\r\nHost: x\r\n\r\n"
              "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
              "bye"
              "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string answers = readUntilClosed(fd);
  close(fd);
  EXPECT_EQ(count(answers, "HTTP/1.1 "), 6u) << answers;
  size_t pong = answers.find("pong"), hello = answers.find("hello"),
         slow = answers.find("slow"), missing = answers.find("404"),
         bye = answers.find("bye"), last = answers.rfind("pong");
  EXPECT_LT(pong, hello);
  EXPECT_LT(hello, slow);
  EXPECT_LT(slow, missing);
  EXPECT_LT(missing, bye);
  EXPECT_LT(bye, last);
  EXPECT_NE(last, std::string::npos);
}

TEST(ConnectionServer, AnAdoptedSocketIsServedAsAnAcceptedOne) {
  // The HTTP fuzz target's way in (test/fuzz/HttpFuzzer.cpp): one end of
  // a socketpair, handed over as if accepted, keep-alive requests one
  // after another, then the client leaves and the server closes its end.
  Serving serving(fastLimits());
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
  serving.server.adoptConnection(sockets[0]);
  for (int request = 0; request < 20; ++request) {
    sendAll(sockets[1], "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string answer;
    Clock::time_point start = Clock::now();
    while (answer.find("pong") == std::string::npos &&
           secondsSince(start) < 5) {
      pollfd entry{sockets[1], POLLIN, 0};
      if (poll(&entry, 1, 50) <= 0)
        continue;
      char buffer[4096];
      ssize_t received = recv(sockets[1], buffer, sizeof buffer, 0);
      if (received <= 0)
        break;
      answer.append(buffer, size_t(received));
    }
    ASSERT_NE(answer.find("pong"), std::string::npos) << request;
    EXPECT_EQ(count(answer, "HTTP/1.1 200"), 1u) << answer;
  }
  sendAll(sockets[1], "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\n"
                      "hello"
                      "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n");
  std::string answers = readUntilClosed(sockets[1]);
  EXPECT_EQ(count(answers, "HTTP/1.1 200"), 2u) << answers;
  EXPECT_LT(answers.find("hello"), answers.find("pong"));
  close(sockets[1]);
  Clock::time_point start = Clock::now();
  while (serving.server.numConnections() != 0 && secondsSince(start) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(serving.server.numConnections(), 0u);
}

TEST(ConnectionServer, TricklingClientsHoldASocketNotAThread) {
  ConnectionLimits limits = fastLimits(); // two threads
  limits.headerTimeout = std::chrono::seconds(2);
  Serving serving(limits);
  std::vector<int> tricklers;
  for (int index = 0; index < 16; ++index) {
    tricklers.push_back(serving.connect());
    sendAll(tricklers.back(), "GET /pi");
  }
  // Sixteen heads unfinished, two threads: the next request is answered.
  for (int round = 0; round < 3; ++round) {
    Clock::time_point start = Clock::now();
    int fd = serving.connect();
    sendAll(fd, "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n");
    std::string answer = readUntilClosed(fd);
    close(fd);
    EXPECT_NE(answer.find("pong"), std::string::npos);
    // Milliseconds; were the tricklers on threads, their 2 s deadline.
    EXPECT_LT(secondsSince(start), 1.0) << "round " << round;
    for (int trickler : tricklers)
      sendAll(trickler, "n");
  }
  // Past the header deadline each is answered 408 and closed.
  for (int trickler : tricklers) {
    std::string answer = readUntilClosed(trickler, 3);
    EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
    close(trickler);
  }
  // Each closes once its client read the answer and closed too.
  Clock::time_point start = Clock::now();
  while (serving.server.numConnections() != 0 && secondsSince(start) < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(serving.server.numConnections(), 0u);
}

TEST(ConnectionServer, SmallBodiesSentSlowlyHoldNoThreadEither) {
  ConnectionLimits limits = fastLimits(); // two threads
  limits.bodyTimeout = std::chrono::seconds(2);
  Serving serving(limits);
  std::vector<int> senders;
  for (int index = 0; index < 8; ++index) {
    senders.push_back(serving.connect());
    sendAll(senders.back(),
            "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nab");
  }
  Clock::time_point start = Clock::now();
  int fd = serving.connect();
  sendAll(fd, "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n");
  std::string answer = readUntilClosed(fd);
  close(fd);
  EXPECT_NE(answer.find("pong"), std::string::npos);
  // Milliseconds; were the bodies read on threads, their 2 s deadline.
  EXPECT_LT(secondsSince(start), 1.0);
  // The rest in time, and a second request right behind it whose body
  // stalls: the first echoed, the second 408 at the body deadline.
  for (int sender : senders)
    sendAll(sender, "cdefghij"
                    "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nab");
  for (int sender : senders) {
    std::string answers = readUntilClosed(sender, 5);
    EXPECT_NE(answers.find("abcdefghij"), std::string::npos) << answers;
    EXPECT_NE(answers.find("HTTP/1.1 408"), std::string::npos) << answers;
    close(sender);
  }
}

TEST(ConnectionServer, AHeadPastItsLimitGets431) {
  ConnectionLimits limits = fastLimits();
  limits.maxHeadBytes = 1024;
  Serving serving(limits);
  int fd = serving.connect();
  sendAll(fd, "GET /ping HTTP/1.1\r\nX-Big: " + std::string(4096, 'b'));
  std::string answer = readUntilClosed(fd);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer;
}

TEST(ConnectionServer, AConnectionPastTheLimitGets503) {
  ConnectionLimits limits = fastLimits();
  limits.maxConnections = 4;
  limits.headerTimeout = std::chrono::seconds(5);
  Serving serving(limits);
  std::vector<int> open;
  for (int index = 0; index < 4; ++index)
    open.push_back(serving.connect());
  int extra = serving.connect();
  std::string answer = readUntilClosed(extra);
  close(extra);
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  for (int fd : open)
    close(fd);
}

TEST(ConnectionServer, ABodyThatStallsEndsAtItsDeadline) {
  Serving serving(fastLimits());
  int fd = serving.connect();
  Clock::time_point start = Clock::now();
  sendAll(fd, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc");
  std::string answer = readUntilClosed(fd);
  double seconds = secondsSince(start);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 4", 0), 0u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_GT(seconds, 0.25);
  EXPECT_LT(seconds, 3.0);
}

TEST(ConnectionServer, StoppingClosesConnectionsStillSendingAtOnce) {
  ConnectionLimits limits = fastLimits();
  limits.headerTimeout = std::chrono::seconds(60);
  limits.bodyTimeout = std::chrono::seconds(60);
  Serving serving(limits);
  int trickler = serving.connect();
  sendAll(trickler, "GET /pi");
  int bodySender = serving.connect();
  sendAll(bodySender,
          "POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\nabc");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // httplib's stop() waited for both as long as they kept sending.
  double seconds = serving.stop();
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(serving.server.numConnections(), 0u);
  close(trickler);
  close(bodySender);
}

TEST(ConnectionServer, MalformedAndCutRequestsLeaveItAnswering) {
  ConnectionLimits limits = fastLimits();
  limits.maxHeadBytes = 2048;
  Serving serving(limits);
  std::mt19937 random(25);
  auto pick = [&](std::initializer_list<const char *> choices) {
    std::vector<const char *> all(choices);
    return std::string(all[random() % all.size()]);
  };
  for (int round = 0; round < 2000; ++round) {
    std::string request =
        pick({"GET /ping", "POST /echo", "POST /nosuch", "PUT /echo",
              "BREW /ping", "GET", "POST /echo?x=%zz", ""}) +
        pick({" HTTP/1.1\r\n", " HTTP/1.0\r\n", " HTTP/9\r\n", "\r\n", "\n",
              " HTTP/1.1\n"});
    int headers = int(random() % 4);
    for (int index = 0; index < headers; ++index)
      request +=
          pick({"Content-Length: 5\r\n", "Content-Length: -1\r\n",
                "Content-Length: 99999999999999999999\r\n",
                "Transfer-Encoding: chunked\r\n", "Transfer-Encoding: gzip\r\n",
                "Expect: 100-continue\r\n", "Connection: close\r\n",
                "X: \x01\xff\r\n", ": empty\r\n", "NoColon\r\n"});
    request += pick({"\r\n", "\n", ""});
    request += pick({"hello", "5\r\nhello\r\n0\r\n\r\n", "ffffffffffffffff\r\n",
                     "zz\r\n", "3\r\nab", "", "GET /ping HTTP/1.1\r\n\r\n"});
    // Cut anywhere, or a byte changed.
    if (!request.empty() && random() % 3 == 0)
      request.resize(random() % request.size());
    if (!request.empty() && random() % 3 == 0)
      request[random() % request.size()] = char(random());
    int fd = serving.connect();
    sendAll(fd, request);
    shutdown(fd, SHUT_WR);
    std::string answer = readUntilClosed(fd, 3);
    close(fd);
    if (!answer.empty()) {
      EXPECT_EQ(answer.rfind("HTTP/1.1 ", 0), 0u) << answer;
    }
  }
  int fd = serving.connect();
  sendAll(fd, "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(readUntilClosed(fd).find("pong"), std::string::npos);
  close(fd);
  Clock::time_point start = Clock::now();
  while (serving.server.numConnections() != 0 && secondsSince(start) < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(serving.server.numConnections(), 0u);
  EXPECT_LT(serving.stop(), 2.0);
}

} // namespace
} // namespace spanc::server
