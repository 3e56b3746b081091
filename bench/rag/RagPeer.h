//===- RagPeer.h - llama.cpp's llama-server on the RAG workload -----------===//
//
// The rag benchmark's peer column: the exact prompt of a planned RAG call
// (its token ids rendered back to raw ChatML text, special markers as
// text, so llama-server parses them as its own special tokens) sent to
// llama-server through bench/peers/LlamaServer.h, TTFT taken from the
// server's timings.prompt_ms.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_RAG_RAGPEER_H
#define SPANC_BENCH_RAG_RAGPEER_H

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "plan/Plan.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace spanc::bench {

struct PeerTiming {
  double promptMs = 0;
  /// Tokens of the whole prompt (by the server's tokenizer where it says,
  /// else ours) and those the server computed (timings.prompt_n; the rest
  /// came from its cache).
  int promptTokensTotal = 0;
  int promptTokensComputed = 0;
};

class RagPeer {
public:
  /// Starts llama-server on the session's model; fails with the reason
  /// when the peer is not available (then the column is left out).
  static llvm::Expected<std::unique_ptr<RagPeer>>
  start(const BenchArgs &args, const ModelSession &session);
  ~RagPeer();

  /// Sends the prompt of `plan`'s last call (all of its tokens literal).
  llvm::Expected<PeerTiming> complete(const plan::Plan &plan);

  std::string describe() const;

private:
  RagPeer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace spanc::bench

#endif // SPANC_BENCH_RAG_RAGPEER_H
