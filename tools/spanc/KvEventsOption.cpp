//===- KvEventsOption.cpp - spanc serve's --kv-events options -------------===//

#include "tools/spanc/KvEventsOption.h"

#include "tools/spanc/CommandLine.h"

#include "llvm/Support/Error.h"

namespace spanc::cli {

namespace po = boost::program_options;

namespace {
constexpr int64_t kMaxBufferBatches = 1000000;
constexpr int64_t kMaxBufferMiB = 4096;
constexpr int64_t kMaxPendingEvents = 10000000;
} // namespace

void addKvEventsOptions(po::options_description &options) {
  options.add_options()                                                   //
      ("kv-events", po::value<std::string>(),                             //
       "publish vLLM-format KV cache events (ZeroMQ PUB, [topic, "        //
       "sequence, msgpack KVEventBatch]) on this address: "               //
       "tcp://127.0.0.1:PORT (loopback only: they carry prompt tokens; "  //
       "PORT 0: any, printed on stderr) or ipc://PATH. Off by default")   //
      ("kv-events-replay", po::value<std::string>(),                      //
       "vLLM's replay socket (ZeroMQ ROUTER) for late subscribers: a "    //
       "request [\"\", 8-byte start sequence] gets the buffered batches " //
       "from there, then sequence -1 (same address rules)")               //
      ("kv-events-topic", po::value<std::string>()->default_value(""),    //
       "first frame of every event message (vLLM's default: empty)")      //
      ("kv-events-buffer", po::value<int64_t>()->default_value(10000),    //
       "event batches kept for replay (vLLM's buffer_steps), at most "    //
       "--kv-events-buffer-mib of them")                                  //
      ("kv-events-buffer-mib", po::value<int64_t>()->default_value(64),   //
       "MiB of event batches kept for replay")                            //
      ("kv-events-queue", po::value<int64_t>()->default_value(100000),    //
       "block reports waiting to be published; past it they are dropped " //
       "and the next batch starts with AllBlocksCleared (counted in "     //
       "spanc:kv_events_dropped_total)");
}

bool readKvEventsOptions(const po::variables_map &values, unsigned blockSize,
                         server::KvEventOptions &options, bool &enabled) {
  enabled = values.count("kv-events") != 0;
  if (!enabled) {
    if (values.count("kv-events-replay")) {
      reportError("serve", "--kv-events-replay needs --kv-events");
      return false;
    }
    return true;
  }
  options.endpoint = values["kv-events"].as<std::string>();
  if (auto error =
          server::checkKvEventEndpoint(options.endpoint, "kv-events")) {
    reportError("serve", llvm::toString(std::move(error)));
    return false;
  }
  if (values.count("kv-events-replay")) {
    options.replayEndpoint = values["kv-events-replay"].as<std::string>();
    if (auto error = server::checkKvEventEndpoint(options.replayEndpoint,
                                                  "kv-events-replay")) {
      reportError("serve", llvm::toString(std::move(error)));
      return false;
    }
  }
  std::optional<int64_t> batches =
      readBoundedInt("serve", values, "kv-events-buffer", 0, kMaxBufferBatches);
  std::optional<int64_t> mebibytes =
      readBoundedInt("serve", values, "kv-events-buffer-mib", 0, kMaxBufferMiB);
  std::optional<int64_t> queue =
      readBoundedInt("serve", values, "kv-events-queue", 1, kMaxPendingEvents);
  if (!batches || !mebibytes || !queue)
    return false;
  options.topic = values["kv-events-topic"].as<std::string>();
  options.blockSize = blockSize;
  options.bufferBatches = size_t(*batches);
  options.bufferBytes = size_t(*mebibytes) << 20;
  options.maxPendingEvents = size_t(*queue);
  return true;
}

} // namespace spanc::cli
