//===- ClientSocketTest.cpp - Finding and polling an HTTP client's socket -===//
//
// A loopback connection made in the test: the accepted socket reads as
// open while the client is there (even with a pipelined request waiting,
// which stays unread), and as closed once the client closes its end.
//
//===----------------------------------------------------------------------===//

#include "server/ClientSocket.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spanc::server {
namespace {

class ClientSocketTest : public ::testing::Test {
protected:
  void SetUp() override {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(
        bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof address),
        0);
    ASSERT_EQ(listen(listener, 1), 0);
    socklen_t length = sizeof address;
    ASSERT_EQ(
        getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length),
        0);
    client = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(
        connect(client, reinterpret_cast<sockaddr *>(&address), sizeof address),
        0);
    accepted = accept(listener, nullptr, nullptr);
    ASSERT_GE(accepted, 0);
  }
  void TearDown() override {
    for (int fd : {client, accepted, listener})
      if (fd >= 0)
        close(fd);
  }

  int listener = -1, client = -1, accepted = -1;
};

TEST_F(ClientSocketTest, AClosedClientReadsClosedAndAPipelinedRequestStays) {
  EXPECT_FALSE(clientClosed(accepted));
  EXPECT_FALSE(clientClosed(-1));
  const char next[] = "GET /health HTTP/1.1\r\n\r\n";
  ASSERT_EQ(send(client, next, sizeof next - 1, 0), ssize_t(sizeof next - 1));
  pollfd readable{accepted, POLLIN, 0};
  ASSERT_EQ(poll(&readable, 1, -1), 1);
  EXPECT_FALSE(clientClosed(accepted));
  char buffer[64];
  EXPECT_EQ(recv(accepted, buffer, sizeof buffer, MSG_DONTWAIT),
            ssize_t(sizeof next - 1));

  close(client);
  client = -1;
  pollfd hangUp{accepted, POLLRDHUP, 0};
  ASSERT_EQ(poll(&hangUp, 1, -1), 1);
  EXPECT_TRUE(clientClosed(accepted));
}

} // namespace
} // namespace spanc::server
