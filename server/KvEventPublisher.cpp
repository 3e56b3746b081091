//===- KvEventPublisher.cpp - vLLM-format KV events over ZeroMQ -----------===//

#include "server/KvEventPublisher.h"

#include "llvm/ADT/StringExtras.h"

#include <msgpack/pack.hpp>
#include <msgpack/sbuffer.hpp>
#include <zmq.hpp>

#include <chrono>
#include <deque>

namespace spanc::server {

namespace {

llvm::Error endpointError(llvm::StringRef flag, llvm::StringRef endpoint,
                          const llvm::Twine &why) {
  return llvm::createStringError(
      std::errc::invalid_argument, "%s",
      ("--" + flag + " '" + endpoint + "': " + why).str().c_str());
}

bool isLoopbackHost(llvm::StringRef host) {
  if (host == "localhost" || host == "[::1]")
    return true;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  host.split(parts, '.');
  unsigned octet = 0;
  if (parts.size() != 4 || parts[0] != "127")
    return false;
  return llvm::all_of(parts, [&](llvm::StringRef part) {
    return !part.empty() && llvm::all_of(part, llvm::isDigit) &&
           !part.getAsInteger(10, octet) && octet <= 255;
  });
}

/// The address ZeroMQ binds: localhost named by its address, port 0 as
/// ZeroMQ's "any port".
std::string bindAddress(llvm::StringRef endpoint) {
  if (!endpoint.startswith("tcp://"))
    return endpoint.str();
  auto [host, port] = endpoint.drop_front(6).rsplit(':');
  if (host == "localhost")
    host = "127.0.0.1";
  return ("tcp://" + host + ":" + (port == "0" ? "*" : port)).str();
}

void packString(msgpack::packer<msgpack::sbuffer> &pack, llvm::StringRef text) {
  pack.pack_str(uint32_t(text.size()));
  pack.pack_str_body(text.data(), uint32_t(text.size()));
}

/// The low word of spanc's 128-bit hash: vLLM's and Dynamo's consumers
/// key blocks by a 64-bit integer.
uint64_t externalHash(const kv::BlockHash &hash) { return hash.low; }

std::string bigEndian(int64_t value) {
  std::string bytes(8, '\0');
  for (int i = 7; i >= 0; --i, value = int64_t(uint64_t(value) >> 8))
    bytes[size_t(i)] = char(uint64_t(value) & 0xff);
  return bytes;
}

int64_t readBigEndian(const zmq::message_t &frame) {
  const auto *bytes = static_cast<const unsigned char *>(frame.data());
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i)
    value = value << 8 | bytes[i];
  return int64_t(value);
}

} // namespace

llvm::Error checkKvEventEndpoint(llvm::StringRef endpoint,
                                 llvm::StringRef flag) {
  if (endpoint.startswith("ipc://")) {
    if (endpoint.size() == 6)
      return endpointError(flag, endpoint, "expected ipc://PATH");
    return llvm::Error::success();
  }
  if (!endpoint.startswith("tcp://"))
    return endpointError(flag, endpoint,
                         "expected tcp://127.0.0.1:PORT or ipc://PATH");
  auto [host, port] = endpoint.drop_front(6).rsplit(':');
  unsigned number = 0;
  if (port.empty() || host.empty() || !llvm::all_of(port, llvm::isDigit) ||
      port.getAsInteger(10, number) || number > 65535)
    return endpointError(flag, endpoint,
                         "expected tcp://HOST:PORT, PORT in [0, 65535]");
  // The events carry every cached prompt's tokens: like the prompts, they
  // stay on this machine unless a relay on it forwards them.
  if (!isLoopbackHost(host))
    return endpointError(flag, endpoint,
                         "not a loopback address (127.0.0.1, localhost); "
                         "the events carry prompt tokens");
  if (host == "[::1]")
    return endpointError(flag, endpoint, "IPv6: use tcp://127.0.0.1:PORT");
  return llvm::Error::success();
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t publisher{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
  std::deque<std::pair<uint64_t, std::string>> buffer;
  size_t bufferBytes = 0;
};

KvEventPublisher::KvEventPublisher(const KvEventOptions &options)
    : options(options), sockets(std::make_unique<Sockets>()) {}

llvm::Expected<std::unique_ptr<KvEventPublisher>>
KvEventPublisher::create(const KvEventOptions &options) {
  if (auto error = checkKvEventEndpoint(options.endpoint, "kv-events"))
    return error;
  if (!options.replayEndpoint.empty())
    if (auto error =
            checkKvEventEndpoint(options.replayEndpoint, "kv-events-replay"))
      return error;
  std::unique_ptr<KvEventPublisher> publisher(new KvEventPublisher(options));
  Sockets &sockets = *publisher->sockets;
  try {
    // Linger 0: a subscriber that went away never holds up shutdown.
    sockets.publisher.set(zmq::sockopt::linger, 0);
    sockets.publisher.set(zmq::sockopt::sndhwm, 100000);
    sockets.publisher.bind(bindAddress(options.endpoint));
    publisher->boundEndpoint =
        sockets.publisher.get(zmq::sockopt::last_endpoint);
    if (!options.replayEndpoint.empty()) {
      sockets.replay.emplace(sockets.context, zmq::socket_type::router);
      sockets.replay->set(zmq::sockopt::linger, 0);
      sockets.replay->bind(bindAddress(options.replayEndpoint));
      publisher->boundReplayEndpoint =
          sockets.replay->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t &error) {
    return llvm::createStringError(
        std::errc::address_in_use, "--kv-events: cannot bind %s%s%s: %s",
        options.endpoint.c_str(), options.replayEndpoint.empty() ? "" : " / ",
        options.replayEndpoint.c_str(), error.what());
  }
  publisher->thread = std::thread([raw = publisher.get()] { raw->run(); });
  return publisher;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_one();
  if (thread.joinable())
    thread.join();
}

bool KvEventPublisher::dropQueueIfFull() {
  if (pending.size() < options.maxPendingEvents)
    return false;
  // Dropping one report would leave subscribers wrong for good; start them
  // over instead (the header says why).
  figures.dropped += pending.size() + 1;
  pending.clear();
  pendingTokens.clear();
  clearPending = true;
  return true;
}

void KvEventPublisher::blockStored(const kv::StoredBlock &block) {
  std::lock_guard<std::mutex> lock(mutex);
  if (dropQueueIfFull())
    return;
  Pending event;
  event.stored = true;
  event.hash = externalHash(block.hash);
  event.parent = externalHash(block.parent);
  event.parentIsRoot = block.parentIsRoot;
  event.span = block.kind == plan::SegmentKind::Span;
  event.firstToken = uint32_t(pendingTokens.size());
  event.numTokens = uint32_t(block.tokens.size());
  pendingTokens.insert(pendingTokens.end(), block.tokens.begin(),
                       block.tokens.end());
  pending.push_back(event);
  wake.notify_one();
}

void KvEventPublisher::blockRemoved(const kv::BlockHash &hash) {
  std::lock_guard<std::mutex> lock(mutex);
  if (dropQueueIfFull())
    return;
  Pending event;
  event.hash = externalHash(hash);
  pending.push_back(event);
  wake.notify_one();
}

KvEventCounts KvEventPublisher::counts() const {
  std::lock_guard<std::mutex> lock(mutex);
  return figures;
}

std::string KvEventPublisher::encode(const std::vector<Pending> &events,
                                     const std::vector<int32_t> &tokens,
                                     bool cleared) const {
  // Consecutive stores that continue one chain (each the parent of the
  // next, the earlier one full, the same kind) become one BlockStored, as
  // vLLM reports a request's new blocks; consecutive removals one
  // BlockRemoved. A partial block can only end a BlockStored, where
  // consumers that take full blocks only (Dynamo) stop.
  struct Group {
    size_t begin, end;
  };
  std::vector<Group> groups;
  for (size_t index = 0; index < events.size(); ++index) {
    const Pending &event = events[index];
    if (!groups.empty() && groups.back().end == index) {
      const Pending &previous = events[index - 1];
      bool joins = event.stored == previous.stored &&
                   (!event.stored ||
                    (!event.parentIsRoot && event.parent == previous.hash &&
                     previous.numTokens == options.blockSize &&
                     event.span == previous.span));
      if (joins) {
        ++groups.back().end;
        continue;
      }
    }
    groups.push_back({index, index + 1});
  }

  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pack(&buffer);
  pack.pack_array(3);
  pack.pack_double(std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count());
  pack.pack_array(uint32_t(groups.size() + (cleared ? 1 : 0)));
  if (cleared) {
    pack.pack_array(1);
    packString(pack, "AllBlocksCleared");
  }
  for (const Group &group : groups) {
    const Pending &first = events[group.begin];
    const size_t count = group.end - group.begin;
    if (!first.stored) {
      pack.pack_array(3);
      packString(pack, "BlockRemoved");
      pack.pack_array(uint32_t(count));
      for (size_t i = group.begin; i < group.end; ++i)
        pack.pack_uint64(events[i].hash);
      packString(pack, "GPU");
      continue;
    }
    // A span's blocks say so in extra_keys (one entry per block, as vLLM
    // puts what else entered a block's hash there): consumers that do not
    // know it ignore it.
    pack.pack_array(first.span ? 9 : 8);
    packString(pack, "BlockStored");
    pack.pack_array(uint32_t(count));
    for (size_t i = group.begin; i < group.end; ++i)
      pack.pack_uint64(events[i].hash);
    if (first.parentIsRoot)
      pack.pack_nil();
    else
      pack.pack_uint64(first.parent);
    uint32_t numTokens = 0;
    for (size_t i = group.begin; i < group.end; ++i)
      numTokens += events[i].numTokens;
    pack.pack_array(numTokens);
    for (size_t i = group.begin; i < group.end; ++i)
      for (uint32_t t = 0; t < events[i].numTokens; ++t)
        pack.pack_uint32(uint32_t(tokens[events[i].firstToken + t]));
    pack.pack_uint32(options.blockSize);
    pack.pack_nil();         // lora_id
    packString(pack, "GPU"); // medium: the one tier, as vLLM names it
    pack.pack_nil();         // lora_name
    if (first.span) {
      pack.pack_array(uint32_t(count));
      for (size_t i = 0; i < count; ++i) {
        pack.pack_array(1);
        packString(pack, "spanc:span");
      }
    }
  }
  pack.pack_uint32(0); // data_parallel_rank
  return std::string(buffer.data(), buffer.size());
}

void KvEventPublisher::send(std::string payload) {
  Sockets &own = *sockets;
  const uint64_t sequence = nextSequence++;
  const std::string sequenceBytes = bigEndian(int64_t(sequence));
  own.publisher.send(zmq::buffer(options.topic), zmq::send_flags::sndmore);
  own.publisher.send(zmq::buffer(sequenceBytes), zmq::send_flags::sndmore);
  own.publisher.send(zmq::buffer(payload), zmq::send_flags::none);
  own.bufferBytes += payload.size();
  own.buffer.emplace_back(sequence, std::move(payload));
  while (!own.buffer.empty() && (own.buffer.size() > options.bufferBatches ||
                                 own.bufferBytes > options.bufferBytes)) {
    own.bufferBytes -= own.buffer.front().second.size();
    own.buffer.pop_front();
  }
}

void KvEventPublisher::serviceReplay() {
  Sockets &own = *sockets;
  if (!own.replay)
    return;
  zmq::socket_t &replay = *own.replay;
  // Answer what is waiting; a malformed request is ignored, as vLLM does.
  for (int request = 0; request < 16; ++request) {
    std::vector<zmq::message_t> frames;
    zmq::message_t frame;
    if (!replay.recv(frame, zmq::recv_flags::dontwait))
      return;
    frames.push_back(std::move(frame));
    while (frames.back().more() && frames.size() < 8) {
      zmq::message_t next;
      if (!replay.recv(next, zmq::recv_flags::dontwait))
        break;
      frames.push_back(std::move(next));
    }
    if (frames.size() != 3 || frames[1].size() != 0 || frames[2].size() != 8)
      continue;
    const int64_t start = readBigEndian(frames[2]);
    const std::string identity = frames[0].to_string();
    auto reply = [&](const std::string &sequence, const std::string &payload) {
      replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      replay.send(zmq::message_t(), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(sequence), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(payload), zmq::send_flags::none);
    };
    for (const auto &[sequence, payload] : own.buffer)
      if (int64_t(sequence) >= start)
        reply(bigEndian(int64_t(sequence)), payload);
    reply(bigEndian(-1), std::string());
    std::lock_guard<std::mutex> lock(mutex);
    ++figures.replays;
  }
}

void KvEventPublisher::run() {
  std::vector<Pending> events;
  std::vector<int32_t> tokens;
  while (true) {
    bool cleared = false, stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex);
      // A short wait: the replay socket is polled between batches, and
      // reports arriving together go out as one batch.
      wake.wait_for(lock, std::chrono::milliseconds(5), [&] {
        return stopping || !pending.empty() || clearPending;
      });
      events.swap(pending);
      tokens.swap(pendingTokens);
      cleared = clearPending;
      clearPending = false;
      stop = stopping;
    }
    if (!events.empty() || cleared) {
      std::string payload = encode(events, tokens, cleared);
      try {
        send(std::move(payload));
      } catch (const zmq::error_t &) {
        // PUB drops rather than blocks; an error here is the context
        // ending, and the batch is lost with it.
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++figures.batches;
      figures.events += events.size();
    }
    events.clear();
    tokens.clear();
    try {
      serviceReplay();
    } catch (const zmq::error_t &) {
      // A requester gone mid-answer: nothing to do.
    }
    if (stop)
      return;
  }
}

} // namespace spanc::server
