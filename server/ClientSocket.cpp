//===- ClientSocket.cpp - Whether the client of an HTTP thread went away --===//

#include "server/ClientSocket.h"

#include <cerrno>

#include <poll.h>
#include <sys/socket.h>

namespace spanc::server {

bool clientClosed(int fd) {
  if (fd < 0)
    return false;
  pollfd entry{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&entry, 1, 0) <= 0)
    return false;
  if (entry.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP))
    return true;
  if (!(entry.revents & POLLIN))
    return false;
  // Readable: end of file, or the client's next bytes, which stay queued.
  char byte;
  ssize_t read = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return read == 0 || (read < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR);
}

} // namespace spanc::server
