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

void header(std::string &out, const char *name, const char *type,
            const char *help) {
  out += std::string("# HELP ") + name + " " + help + "\n";
  out += std::string("# TYPE ") + name + " " + type + "\n";
}

void sample(std::string &out, const std::string &name,
            const std::string &labels, double value) {
  out += name + "{" + labels + "} " + number(value) + "\n";
}

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

void ServerMetrics::setLoad(uint64_t runningNow, uint64_t waitingNow,
                            double usage) {
  std::lock_guard<std::mutex> lock(mutex);
  running = runningNow;
  waiting = waitingNow;
  kvCacheUsage = std::clamp(usage, 0.0, 1.0);
}

void ServerMetrics::recordFinished(const FinishedRequest &request) {
  std::lock_guard<std::mutex> lock(mutex);
  promptTokens += request.promptTokens;
  generationTokens += request.generationTokens;
  cacheQueries += request.cacheQueries;
  cacheHits += request.cacheHits;
  preemptions += request.preemptions;
  for (FinishReason reason : request.reasons)
    ++finished[size_t(reason)];
  if (request.hasFirstToken)
    timeToFirstToken.observe(request.ttftSeconds);
  for (double gap : request.interTokenSeconds)
    interTokenLatency.observe(gap);
  endToEndLatency.observe(request.e2eSeconds);
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::string out;
  header(out, "vllm:num_requests_running", "gauge",
         "Number of requests in model execution batches.");
  sample(out, "vllm:num_requests_running", labels, double(running));
  header(out, "vllm:num_requests_waiting", "gauge",
         "Number of requests waiting to be processed.");
  sample(out, "vllm:num_requests_waiting", labels, double(waiting));
  header(out, "vllm:kv_cache_usage_perc", "gauge",
         "KV-cache usage. 1 means 100 percent usage.");
  sample(out, "vllm:kv_cache_usage_perc", labels, kvCacheUsage);
  header(out, "vllm:cache_config_info", "gauge",
         "Information of the LLMCacheConfig");
  sample(out, "vllm:cache_config_info",
         labels + ",block_size=\"" + std::to_string(blockSize) +
             "\",num_gpu_blocks=\"" + std::to_string(numBlocks) + "\"",
         1.0);
  header(out, "vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.");
  sample(out, "vllm:prefix_cache_queries_total", labels, double(cacheQueries));
  header(out, "vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.");
  sample(out, "vllm:prefix_cache_hits_total", labels, double(cacheHits));
  header(out, "vllm:prompt_tokens_total", "counter",
         "Number of prefill tokens processed.");
  sample(out, "vllm:prompt_tokens_total", labels, double(promptTokens));
  header(out, "vllm:generation_tokens_total", "counter",
         "Number of generation tokens processed.");
  sample(out, "vllm:generation_tokens_total", labels, double(generationTokens));
  header(out, "vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.");
  sample(out, "vllm:num_preemptions_total", labels, double(preemptions));
  header(out, "vllm:request_success_total", "counter",
         "Count of successfully processed requests.");
  const char *reasonNames[] = {"stop", "length", "abort"};
  for (size_t reason = 0; reason < 3; ++reason)
    sample(out, "vllm:request_success_total",
           labels + ",finished_reason=\"" + reasonNames[reason] + "\"",
           double(finished[reason]));
  header(out, "vllm:time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.");
  timeToFirstToken.render("vllm:time_to_first_token_seconds", labels, out);
  header(out, "vllm:inter_token_latency_seconds", "histogram",
         "Histogram of inter-token latency in seconds.");
  interTokenLatency.render("vllm:inter_token_latency_seconds", labels, out);
  header(out, "vllm:e2e_request_latency_seconds", "histogram",
         "Histogram of e2e request latency in seconds.");
  endToEndLatency.render("vllm:e2e_request_latency_seconds", labels, out);
  return out;
}

} // namespace spanc::server
