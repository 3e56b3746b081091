//===- ClientSocket.cpp - Whether the client of an HTTP thread went away --===//

#include "server/ClientSocket.h"

#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spanc::server {

namespace {

/// The numeric host and the port of a socket address.
bool hostAndPort(const sockaddr_storage &address, socklen_t length,
                 std::string &host, int &port) {
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr *>(&address), length, text,
                  sizeof text, nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  host = text;
  if (address.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in &>(address).sin_port);
  else if (address.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6 &>(address).sin6_port);
  else
    return false;
  return true;
}

} // namespace

int findClientSocket(const std::string &remoteHost, int remotePort,
                     int localPort) {
  if (remotePort < 0 || localPort < 0)
    return -1;
  // The open descriptors are listed under /proc; the one wanted is a
  // socket connected to the peer httplib named.
  DIR *descriptors = opendir("/proc/self/fd");
  if (!descriptors)
    return -1;
  int found = -1;
  while (dirent *entry = readdir(descriptors)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
      continue;
    int fd = std::atoi(entry->d_name);
    if (fd == dirfd(descriptors))
      continue;
    sockaddr_storage address;
    socklen_t length = sizeof address;
    std::string host;
    int port = -1;
    // Fails for anything but a connected socket.
    if (getpeername(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0 ||
        !hostAndPort(address, length, host, port) || port != remotePort ||
        host != remoteHost)
      continue;
    length = sizeof address;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0 ||
        !hostAndPort(address, length, host, port) || port != localPort)
      continue;
    found = fd;
    break;
  }
  closedir(descriptors);
  return found;
}

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
