//===- KvEventPublisher.h - vLLM-format KV events over ZeroMQ -------------===//
//
// spanc serve --kv-events (issue 27): the block pool's store and remove
// reports (kv::KvEventSink), published as vLLM publishes its KV cache
// events, so that KV-aware routers (NVIDIA Dynamo, llm-d, ...) can follow
// what each replica holds. A ZeroMQ PUB socket sends multipart messages
// [topic, 8-byte big-endian sequence number, msgpack KVEventBatch], the
// batch encoded as msgspec encodes vLLM's array-like tagged structs:
//
//   [ts, [event, ...], data_parallel_rank]
//   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//    lora_id, medium, lora_name(, extra_keys)]
//   ["BlockRemoved", block_hashes, medium]
//   ["AllBlocksCleared"]
//
// An optional ROUTER replay socket answers a late subscriber as vLLM's
// does: a request [empty, 8-byte start sequence] gets every buffered batch
// from that sequence on, each as [empty, sequence, payload], then
// [empty, -1, empty]. docs/ARCHITECTURE.md, "KV events", maps spanc's
// hashes onto these fields.
//
// The engine thread only appends to a bounded queue; a thread of the
// publisher's own encodes and sends, so a slow network never stalls a
// step. Past the bound the queue is dropped and the next batch starts with
// AllBlocksCleared, so a subscriber never holds a block the replica lost.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_KVEVENTPUBLISHER_H
#define SPANC_SERVER_KVEVENTPUBLISHER_H

#include "runtime/kv/KvEventSink.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spanc::server {

struct KvEventOptions {
  /// Where the PUB socket binds: tcp://HOST:PORT on a loopback address
  /// (PORT 0: any free port), or ipc://PATH.
  std::string endpoint;
  /// The ROUTER replay socket's address (same rules); empty: none.
  std::string replayEndpoint;
  /// The first frame of every message (vLLM's default is empty).
  std::string topic;
  /// Tokens per block (every BlockStored carries it).
  unsigned blockSize = 16;
  /// Batches kept for replay, and their bytes at most.
  size_t bufferBatches = 10000;
  size_t bufferBytes = size_t(64) << 20;
  /// Events waiting for the publisher thread; past it they are dropped
  /// (see above).
  size_t maxPendingEvents = 100000;
};

/// Checks an endpoint of --kv-events or --kv-events-replay: tcp:// on a
/// loopback address with a port, or ipc://. `flag` names the option in the
/// error.
llvm::Error checkKvEventEndpoint(llvm::StringRef endpoint,
                                 llvm::StringRef flag);

/// What the publisher did so far (for /metrics).
struct KvEventCounts {
  uint64_t batches = 0; ///< messages published
  uint64_t events = 0;  ///< block reports in them (stored + removed)
  uint64_t dropped = 0; ///< reports dropped past maxPendingEvents
  uint64_t replays = 0; ///< replay requests answered
};

class KvEventPublisher : public kv::KvEventSink {
public:
  /// Binds the sockets (failing with the reason: a bad or busy address)
  /// and starts the publisher thread, which first publishes
  /// AllBlocksCleared (a subscriber that knew an earlier process on this
  /// address forgets it).
  static llvm::Expected<std::unique_ptr<KvEventPublisher>>
  create(const KvEventOptions &options);
  /// Publishes what is queued, then stops.
  ~KvEventPublisher() override;

  void blockStored(const kv::StoredBlock &block) override;
  void blockRemoved(const kv::BlockHash &hash) override;

  /// The addresses bound (a port of 0 resolved).
  const std::string &endpoint() const { return boundEndpoint; }
  const std::string &replayEndpoint() const { return boundReplayEndpoint; }
  KvEventCounts counts() const;

private:
  struct Sockets;
  /// A report waiting for the thread; tokens live in pendingTokens.
  struct Pending {
    bool stored = false;
    bool parentIsRoot = false;
    bool span = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    uint32_t firstToken = 0;
    uint32_t numTokens = 0;
  };

  explicit KvEventPublisher(const KvEventOptions &options);
  void run();
  /// With `mutex` held: past maxPendingEvents, drops the queue (counted)
  /// and marks the next batch AllBlocksCleared; returns whether it did.
  bool dropQueueIfFull();
  /// Encodes one batch of `events` (AllBlocksCleared first when `cleared`).
  std::string encode(const std::vector<Pending> &events,
                     const std::vector<int32_t> &tokens, bool cleared) const;
  void send(std::string payload);
  void serviceReplay();

  KvEventOptions options;
  std::unique_ptr<Sockets> sockets;
  std::string boundEndpoint;
  std::string boundReplayEndpoint;

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::vector<Pending> pending;
  std::vector<int32_t> pendingTokens;
  bool clearPending = true; ///< the next batch starts with AllBlocksCleared
  bool stopping = false;
  KvEventCounts figures;

  // The publisher thread's own.
  uint64_t nextSequence = 0;
  std::thread thread;
};

} // namespace spanc::server

#endif // SPANC_SERVER_KVEVENTPUBLISHER_H
