//===- ClientSocket.h - Whether the client of an HTTP thread went away ----===//
//
// A request whose client disconnects must be cancelled, not computed to the
// end for nobody (docs/ARCHITECTURE.md, "Serving"). cpp-httplib 0.11 (the
// Debian package) gives a handler neither the connection's socket nor a
// disconnect hook, and while a non-streaming answer is computed nothing is
// written that could fail. So the HTTP thread finds its connection's socket
// by the addresses httplib does give (the peer's, and the local port), and
// polls it while it waits: a peer that closed reads as end of file.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_CLIENTSOCKET_H
#define SPANC_SERVER_CLIENTSOCKET_H

#include <string>

namespace spanc::server {

/// The file descriptor of this process's connected TCP socket from
/// `remoteHost` (numeric, as getnameinfo prints it) port `remotePort` to
/// local port `localPort`; -1 when there is none. It stays valid while the
/// thread serving that connection is in its handler (httplib closes it
/// after).
int findClientSocket(const std::string &remoteHost, int remotePort,
                     int localPort);

/// Whether the peer of connected socket `fd` closed its end or the
/// connection failed, without waiting and without consuming what it sent
/// (a pipelined next request stays for httplib to read). False for -1.
bool clientClosed(int fd);

} // namespace spanc::server

#endif // SPANC_SERVER_CLIENTSOCKET_H
