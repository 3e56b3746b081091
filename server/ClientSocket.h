//===- ClientSocket.h - Whether the client of an HTTP thread went away ----===//
//
// A request whose client disconnects must be cancelled, not computed to the
// end for nobody (docs/SERVING.md). cpp-httplib 0.11 (the
// Debian package) has no disconnect hook, and while a non-streaming answer
// is computed nothing is written that could fail. So the HTTP thread polls
// its connection's socket (ConnectionServer::currentSocket) while it
// waits: a peer that closed reads as end of file.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_CLIENTSOCKET_H
#define SPANC_SERVER_CLIENTSOCKET_H

namespace spanc::server {

/// Whether the peer of connected socket `fd` closed its end or the
/// connection failed, without waiting and without consuming what it sent
/// (a pipelined next request stays to be read). False for -1.
bool clientClosed(int fd);

} // namespace spanc::server

#endif // SPANC_SERVER_CLIENTSOCKET_H
