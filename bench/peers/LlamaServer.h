//===- LlamaServer.h - llama.cpp's llama-server as a benchmark peer -------===//
//
// Starts the peer's `llama-server` (built by bench/peers/build_llama_cpp.sh
// in a cache outside the repository) on loopback with prompt caching and
// `--cache-reuse`, and sends it raw prompts through /completion, reading
// the server's own timings, so benchmarks can put llama.cpp's TTFT beside
// spanc's on the same workload, in the same run.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_BENCH_PEERS_LLAMASERVER_H
#define SPANC_BENCH_PEERS_LLAMASERVER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace spanc::bench {

struct LlamaServerOptions {
  /// The llama-server binary; empty: $SPANC_LLAMA_SERVER, else
  /// ~/.cache/spanc/peers/llama.cpp/build/bin/llama-server.
  std::string binary;
  std::string modelPath;
  /// Tokens of KV cache in all, shared by the slots.
  int contextTokens = 8192;
  int threads = 2;
  /// -np: slots, the requests it serves at once (each gets contextTokens /
  /// parallel of the context).
  int parallel = 1;
  /// --cache-reuse N (0: off): reuse cached chunks of at least N tokens
  /// after a mismatch, llama.cpp's answer to shifted prefixes.
  int cacheReuse = 256;
  /// false: `-cram 0`, no RAM prompt cache (an exact-repeat cache).
  bool ramCache = false;
  std::vector<std::string> extraArgs;
};

/// One /completion answer.
struct PeerCompletion {
  /// The server's timings.prompt_ms and timings.prompt_n: time and tokens
  /// of the prompt it had to compute (the rest came from its cache).
  double promptMs = 0;
  int promptTokens = 0;
  /// The whole prompt's length by the server's own tokenizer
  /// (tokens_evaluated), which may differ from ours by a few tokens of the
  /// rendered chat markup; 0 when the server does not say.
  int promptTokensTotal = 0;
  /// Client-side wall time from request to the response (n_predict = 1:
  /// about TTFT plus the HTTP round trip).
  double wallMs = 0;
  std::string text;
};

class LlamaServer {
public:
  /// Starts the server on a free loopback port and waits until /health
  /// answers (or fails with the server's last log lines).
  static llvm::Expected<std::unique_ptr<LlamaServer>>
  start(const LlamaServerOptions &options);
  /// Stops the server (SIGTERM, then SIGKILL after a grace period).
  ~LlamaServer();

  /// POST /completion {prompt, n_predict, cache_prompt: true, temperature 0}.
  /// The prompt is raw text (render the chat template first); special
  /// tokens in it are parsed as such.
  llvm::Expected<PeerCompletion> complete(llvm::StringRef prompt,
                                          int predictTokens = 1);

  /// "llama-server <version> (<flags>)" for result files.
  const std::string &describe() const;
  /// Its loopback port, for clients of its other endpoints (complete()
  /// has one connection, for one request at a time).
  int port() const;

private:
  LlamaServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace spanc::bench

#endif // SPANC_BENCH_PEERS_LLAMASERVER_H
