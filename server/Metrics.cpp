//===- Metrics.cpp - The server's Prometheus metrics, with vLLM's names ---===//

#include "server/Metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace spanc::server {

namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py), so histograms from
// both servers can be compared bucket by bucket.
const std::vector<double> kTimeToFirstTokenBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenLatencyBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

/// A sample value as Prometheus prints it (integers without a fraction).
std::string number(double value) {
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    return std::to_string(int64_t(value)) + ".0";
  // The shortest form that reads back as the same double.
  char text[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

void sample(std::string &out, const std::string &name,
            const std::string &labels, double value) {
  out += name + "{" + labels + "} " + number(value) + "\n";
}

/// A metric family's HELP and TYPE lines; its samples follow.
void family(std::string &out, const char *name, const char *type,
            const char *help) {
  out += std::string("# HELP ") + name + " " + help + "\n";
  out += std::string("# TYPE ") + name + " " + type + "\n";
}

/// A family of one sample, labelled with the model alone.
struct Scalar {
  const char *name;
  const char *type;
  const char *help;
  double value;
};

} // namespace

Histogram::Histogram(std::vector<double> upperBounds)
    : bounds(std::move(upperBounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = size_t(std::lower_bound(bounds.begin(), bounds.end(), value) -
                         bounds.begin());
  ++counts[bucket];
  sum += value;
  ++total;
}

void Histogram::render(const std::string &name, const std::string &labels,
                       std::string &out) const {
  uint64_t cumulative = 0;
  for (size_t bucket = 0; bucket <= bounds.size(); ++bucket) {
    cumulative += counts[bucket];
    std::string le = bucket < bounds.size() ? number(bounds[bucket]) : "+Inf";
    sample(out, name + "_bucket", labels + ",le=\"" + le + "\"",
           double(cumulative));
  }
  sample(out, name + "_sum", labels, sum);
  sample(out, name + "_count", labels, double(total));
}

std::string escapeLabelValue(const std::string &value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"')
      escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped;
}

ServerMetrics::ServerMetrics(std::string modelName, unsigned blockSize,
                             uint32_t numBlocks)
    : labels("model_name=\"" + escapeLabelValue(modelName) + "\""),
      blockSize(blockSize), numBlocks(numBlocks),
      timeToFirstToken(kTimeToFirstTokenBuckets),
      interTokenLatency(kInterTokenLatencyBuckets),
      endToEndLatency(kRequestLatencyBuckets) {}

void ServerMetrics::setLoad(const EngineLoad &now) {
  std::lock_guard<std::mutex> lock(mutex);
  load = now;
  load.kvCacheUsage = std::clamp(now.kvCacheUsage, 0.0, 1.0);
  peakRunning = std::max(peakRunning, now.running);
}

void ServerMetrics::recordFinished(const FinishedRequest &request) {
  std::lock_guard<std::mutex> lock(mutex);
  promptTokens += request.promptTokens;
  generationTokens += request.generationTokens;
  cacheQueries += request.cacheQueries;
  cacheHits += request.cacheHits;
  spanTokensReused += request.spanTokensReused;
  spanTokensRelocated += request.spanTokensRelocated;
  preemptions += request.preemptions;
  for (FinishReason reason : request.reasons)
    ++finished[size_t(reason)];
  if (request.hasFirstToken)
    timeToFirstToken.observe(request.ttftSeconds);
  for (double gap : request.interTokenSeconds)
    interTokenLatency.observe(gap);
  endToEndLatency.observe(request.e2eSeconds);
}

void ServerMetrics::setKvEventSource(std::function<KvEventTotals()> source) {
  std::lock_guard<std::mutex> lock(mutex);
  kvEventSource = std::move(source);
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::string out;
  // vLLM's help texts, word for word, then spanc's own.
  const Scalar gauges[] = {
      {"vllm:num_requests_running", "gauge",
       "Number of requests in model execution batches.", double(load.running)},
      {"vllm:num_requests_waiting", "gauge",
       "Number of requests waiting to be processed.", double(load.waiting)},
      {"vllm:kv_cache_usage_perc", "gauge",
       "KV-cache usage. 1 means 100 percent usage.", load.kvCacheUsage},
      {"spanc:kv_cached_blocks", "gauge",
       "KV blocks in the cache's hash index (reusable by later requests).",
       double(load.cachedBlocks)},
      {"spanc:num_requests_running_peak", "gauge",
       "The most requests in one model execution batch since the server "
       "started.",
       double(peakRunning)},
  };
  const Scalar counters[] = {
      {"vllm:prefix_cache_queries_total", "counter",
       "Prefix cache queries, in terms of number of queried tokens.",
       double(cacheQueries)},
      {"vllm:prefix_cache_hits_total", "counter",
       "Prefix cache hits, in terms of number of cached tokens.",
       double(cacheHits)},
      {"vllm:prompt_tokens_total", "counter",
       "Number of prefill tokens processed.", double(promptTokens)},
      {"vllm:generation_tokens_total", "counter",
       "Number of generation tokens processed.", double(generationTokens)},
      {"vllm:num_preemptions_total", "counter",
       "Cumulative number of preemption from the engine.", double(preemptions)},
      {"spanc:span_tokens_reused_total", "counter",
       "Prompt tokens of spans (children of a plus) found in the cache; "
       "part of vllm:prefix_cache_hits_total.",
       double(spanTokensReused)},
      {"spanc:span_tokens_relocated_total", "counter",
       "Reused prompt tokens whose K was rotated to a new position "
       "(--relocation=rerope; rope-in-kernel moves nothing).",
       double(spanTokensRelocated)},
      {"spanc:blocks_evicted_total", "counter",
       "Cached KV blocks evicted to make room for new ones.",
       double(load.blocksEvicted)},
  };
  for (const Scalar &each : gauges) {
    family(out, each.name, each.type, each.help);
    sample(out, each.name, labels, each.value);
  }
  family(out, "vllm:cache_config_info", "gauge",
         "Information of the LLMCacheConfig");
  sample(out, "vllm:cache_config_info",
         labels + ",block_size=\"" + std::to_string(blockSize) +
             "\",num_gpu_blocks=\"" + std::to_string(numBlocks) + "\"",
         1.0);
  for (const Scalar &each : counters) {
    family(out, each.name, each.type, each.help);
    sample(out, each.name, labels, each.value);
  }
  if (kvEventSource) {
    const KvEventTotals totals = kvEventSource();
    const Scalar events[] = {
        {"spanc:kv_event_batches_total", "counter",
         "KV event batches published (--kv-events).", double(totals.batches)},
        {"spanc:kv_events_total", "counter",
         "Block stores and removals published (--kv-events).",
         double(totals.events)},
        {"spanc:kv_events_dropped_total", "counter",
         "Block reports dropped past the publisher's queue (each drop "
         "is followed by AllBlocksCleared).",
         double(totals.dropped)},
        {"spanc:kv_event_replays_total", "counter",
         "Replay requests answered (--kv-events-replay).",
         double(totals.replays)},
    };
    for (const Scalar &each : events) {
      family(out, each.name, each.type, each.help);
      sample(out, each.name, labels, each.value);
    }
  }
  family(out, "vllm:request_success_total", "counter",
         "Count of successfully processed requests.");
  const char *reasonNames[] = {"stop", "length", "abort"};
  for (size_t reason = 0; reason < 3; ++reason)
    sample(out, "vllm:request_success_total",
           labels + ",finished_reason=\"" + reasonNames[reason] + "\"",
           double(finished[reason]));
  const struct {
    const char *name;
    const char *help;
    const Histogram &histogram;
  } histograms[] = {
      {"vllm:time_to_first_token_seconds",
       "Histogram of time to first token in seconds.", timeToFirstToken},
      {"vllm:inter_token_latency_seconds",
       "Histogram of inter-token latency in seconds.", interTokenLatency},
      {"vllm:e2e_request_latency_seconds",
       "Histogram of e2e request latency in seconds.", endToEndLatency},
  };
  for (const auto &each : histograms) {
    family(out, each.name, "histogram", each.help);
    each.histogram.render(each.name, labels, out);
  }
  return out;
}

} // namespace spanc::server
