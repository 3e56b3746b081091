//===- Metrics.h - The server's Prometheus metrics, with vLLM's names -----===//
//
// GET /metrics renders these in Prometheus text format (0.0.4) under the
// names, types and meanings vLLM exports, so its dashboards and the
// Gateway API Inference Extension's endpoint picker read spanc unchanged:
// load gauges the engine thread sets after every step, counters and
// histograms it adds to when a request finishes. Beside them, spanc's own
// under `spanc:` (span tokens reused and relocated, blocks evicted), which
// vLLM has no name for. Thread-safe.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_METRICS_H
#define SPANC_SERVER_METRICS_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace spanc::server {

/// A Prometheus histogram: cumulative buckets by upper bound, sum, count.
class Histogram {
public:
  explicit Histogram(std::vector<double> upperBounds);
  void observe(double value);
  /// The _bucket, _sum and _count samples of `name`, with `labels` (text
  /// inside the braces, without them) on each.
  void render(const std::string &name, const std::string &labels,
              std::string &out) const;
  uint64_t count() const { return total; }

private:
  std::vector<double> bounds;
  std::vector<uint64_t> counts; ///< per bucket, not cumulative
  double sum = 0;
  uint64_t total = 0;
};

/// Why a request's sequence finished, as vLLM's finished_reason label.
enum class FinishReason { Stop, Length, Abort };

/// What one finished request adds to the counters.
struct FinishedRequest {
  uint64_t promptTokens = 0;
  uint64_t generationTokens = 0;
  /// Prompt tokens looked up in the prefix (span) cache, and found there.
  uint64_t cacheQueries = 0;
  uint64_t cacheHits = 0;
  /// Of cacheHits, the tokens of spans (sched::CallStats::spanReusedTokens),
  /// and the reused tokens whose K was turned to a new position.
  uint64_t spanTokensReused = 0;
  uint64_t spanTokensRelocated = 0;
  uint64_t preemptions = 0;
  /// One reason per sequence (choice).
  std::vector<FinishReason> reasons;
  /// Arrival to first token (when one came) and to the last.
  bool hasFirstToken = false;
  double ttftSeconds = 0;
  double e2eSeconds = 0;
  /// Between consecutive output tokens of each sequence.
  std::vector<double> interTokenSeconds;
};

/// The engine's state after a step.
struct EngineLoad {
  uint64_t running = 0;
  uint64_t waiting = 0;
  /// Referenced blocks over all, in [0, 1].
  double kvCacheUsage = 0;
  /// Cached blocks evicted since the server started (kv::BlockPool's
  /// count, which only grows).
  uint64_t blocksEvicted = 0;
  /// Blocks in the cache's hash index (kv::BlockPool::numCachedBlocks):
  /// what a KV event subscriber holds for this replica.
  uint64_t cachedBlocks = 0;
};

/// --kv-events' figures (server/KvEventPublisher.h), when it is on.
struct KvEventTotals {
  uint64_t batches = 0;
  uint64_t events = 0;
  uint64_t dropped = 0;
  uint64_t replays = 0;
};

class ServerMetrics {
public:
  ServerMetrics(std::string modelName, unsigned blockSize, uint32_t numBlocks);

  void setLoad(const EngineLoad &load);
  /// Renders the KV event figures `source` gives (called under the
  /// metrics' lock; it must not call back).
  void setKvEventSource(std::function<KvEventTotals()> source);
  void recordFinished(const FinishedRequest &request);
  /// The Prometheus text exposition.
  std::string render() const;

private:
  mutable std::mutex mutex;
  std::string labels; ///< model_name="..."
  unsigned blockSize;
  uint32_t numBlocks;
  EngineLoad load;
  /// The most calls one step ran since the server started: whether
  /// requests ran together, without a scraper racing the steps.
  uint64_t peakRunning = 0;
  std::function<KvEventTotals()> kvEventSource;
  uint64_t promptTokens = 0, generationTokens = 0;
  uint64_t cacheQueries = 0, cacheHits = 0, preemptions = 0;
  uint64_t spanTokensReused = 0, spanTokensRelocated = 0;
  uint64_t finished[3] = {0, 0, 0}; ///< by FinishReason
  Histogram timeToFirstToken;
  Histogram interTokenLatency;
  Histogram endToEndLatency;
};

/// `value` escaped for a Prometheus label value (backslash, quote, newline).
std::string escapeLabelValue(const std::string &value);

} // namespace spanc::server

#endif // SPANC_SERVER_METRICS_H
