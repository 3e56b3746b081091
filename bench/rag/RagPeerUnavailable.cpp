//===- RagPeerUnavailable.cpp - The rag peer before its client exists -----===//
//
// Linked instead of RagPeer.cpp while bench/peers has no LlamaServer
// implementation (issue 7 item 6 is another engineer's): start() says so,
// and the rag benchmark leaves the llama-server column out and names the
// reason in rag.md. Switch bench/rag/BUILD to RagPeer.cpp when
// //bench/peers:llama_server exists.
//
//===----------------------------------------------------------------------===//

#include "bench/rag/RagPeer.h"

namespace spanc::bench {

struct RagPeer::Impl {};

RagPeer::~RagPeer() = default;

llvm::Expected<std::unique_ptr<RagPeer>> RagPeer::start(const BenchArgs &,
                                                        const ModelSession &) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the llama-server client bench/peers/LlamaServer.cpp is not built yet");
}

llvm::Expected<PeerTiming> RagPeer::complete(const codegen::Plan &) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "no llama-server peer");
}

std::string RagPeer::describe() const { return "no llama-server peer"; }

} // namespace spanc::bench
