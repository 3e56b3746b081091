//===- RagPeer.cpp - llama.cpp's llama-server on the RAG workload ---------===//

#include "bench/rag/RagPeer.h"

#include "bench/peers/LlamaServer.h"

#include <omp.h>

namespace spanc::bench {

struct RagPeer::Impl {
  std::unique_ptr<LlamaServer> server;
  const ModelSession *session = nullptr;
};

RagPeer::~RagPeer() = default;

llvm::Expected<std::unique_ptr<RagPeer>>
RagPeer::start(const BenchArgs &args, const ModelSession &session) {
  LlamaServerOptions options;
  options.modelPath = args.modelPath;
  options.threads = omp_get_max_threads();
  options.contextTokens = 8192;
  options.cacheReuse = 256;
  // The RAM cache is an exact-repeat cache; --cache-reuse is what the
  // shuffled repeat measures.
  options.ramCache = false;
  auto server = LlamaServer::start(options);
  if (!server)
    return server.takeError();
  std::unique_ptr<RagPeer> peer(new RagPeer());
  peer->impl = std::make_unique<Impl>();
  peer->impl->server = std::move(*server);
  peer->impl->session = &session;
  return peer;
}

llvm::Expected<PeerTiming> RagPeer::complete(const plan::Plan &plan) {
  if (plan.calls.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "an empty plan has no prompt");
  std::vector<kv::TokenId> ids;
  for (const plan::PlanSegment &segment : plan.calls.back().segments) {
    std::optional<std::vector<kv::TokenId>> tokens =
        plan::resolveSegment(segment, {});
    if (!tokens)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the peer replays literal prompts only (no call outputs)");
    ids.insert(ids.end(), tokens->begin(), tokens->end());
  }
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  std::string prompt =
      impl->session->tokenizer().decode(ids32, /*renderSpecial=*/true);
  auto completion = impl->server->complete(prompt, 1);
  if (!completion)
    return completion.takeError();
  PeerTiming timing;
  timing.promptMs = completion->promptMs;
  // The server tokenizes the rendered text itself, which can differ from
  // our ids by a few tokens of chat markup: count its prompt by its own
  // tokenizer where it says, so that reused = total - computed holds.
  timing.promptTokensTotal = completion->promptTokensTotal > 0
                                 ? completion->promptTokensTotal
                                 : int(ids.size());
  timing.promptTokensComputed = completion->promptTokens;
  return timing;
}

std::string RagPeer::describe() const { return impl->server->describe(); }

} // namespace spanc::bench
