//===- MetricsTest.cpp - Prometheus text with vLLM's names ----------------===//

#include "server/Metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace spanc::server {
namespace {

bool hasLine(const std::string &text, const std::string &line) {
  std::istringstream lines(text);
  for (std::string each; std::getline(lines, each);)
    if (each == line)
      return true;
  return false;
}

TEST(ServerMetrics, ThePeakKeepsTheMostRequestsOneStepRan) {
  ServerMetrics metrics("m", 16, 64);
  EngineLoad load;
  for (uint64_t running : {2, 5, 1, 0}) {
    load.running = running;
    metrics.setLoad(load);
  }
  const std::string text = metrics.render();
  EXPECT_TRUE(hasLine(text, "# TYPE spanc:num_requests_running_peak gauge"));
  EXPECT_TRUE(
      hasLine(text, "spanc:num_requests_running_peak{model_name=\"m\"} 5.0"));
  EXPECT_TRUE(hasLine(text, "vllm:num_requests_running{model_name=\"m\"} 0.0"));
}

TEST(ServerMetrics, RendersVllmNamesTypesAndLabels) {
  ServerMetrics metrics("tiny \"q\"", 16, 256);
  EngineLoad load;
  load.running = 3;
  load.waiting = 2;
  load.kvCacheUsage = 0.25;
  metrics.setLoad(load);
  FinishedRequest request;
  request.promptTokens = 100;
  request.generationTokens = 7;
  request.cacheQueries = 100;
  request.cacheHits = 64;
  request.reasons = {FinishReason::Length, FinishReason::Stop};
  request.hasFirstToken = true;
  request.ttftSeconds = 0.03;
  request.e2eSeconds = 1.2;
  request.interTokenSeconds = {0.02, 0.03, 0.2};
  metrics.recordFinished(request);
  request.interTokenSeconds.clear();
  request.reasons = {FinishReason::Stop};
  request.hasFirstToken = false;
  request.e2eSeconds = 0.1;
  metrics.recordFinished(request);
  std::string text = metrics.render();
  const std::string label = "model_name=\"tiny \\\"q\\\"\"";
  for (const char *gauge :
       {"vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc"})
    EXPECT_TRUE(hasLine(text, std::string("# TYPE ") + gauge + " gauge"))
        << gauge;
  EXPECT_TRUE(hasLine(text, "vllm:num_requests_running{" + label + "} 3.0"));
  EXPECT_TRUE(hasLine(text, "vllm:num_requests_waiting{" + label + "} 2.0"));
  EXPECT_TRUE(hasLine(text, "vllm:kv_cache_usage_perc{" + label + "} 0.25"));
  for (const char *counter :
       {"vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:request_success_total"}) {
    EXPECT_TRUE(hasLine(text, std::string("# TYPE ") + counter + " counter"))
        << counter;
    EXPECT_NE(text.find(std::string("# HELP ") + counter + " "),
              std::string::npos);
  }
  EXPECT_TRUE(hasLine(text, "vllm:prompt_tokens_total{" + label + "} 200.0"));
  EXPECT_TRUE(
      hasLine(text, "vllm:prefix_cache_hits_total{" + label + "} 128.0"));
  EXPECT_TRUE(hasLine(text, "vllm:request_success_total{" + label +
                                ",finished_reason=\"stop\"} 2.0"));
  EXPECT_TRUE(hasLine(text, "vllm:request_success_total{" + label +
                                ",finished_reason=\"length\"} 1.0"));
  EXPECT_TRUE(hasLine(text, "vllm:cache_config_info{" + label +
                                ",block_size=\"16\",num_gpu_blocks=\"256\"} "
                                "1.0"));
  // Histograms: cumulative buckets, +Inf equal to _count, _sum.
  EXPECT_TRUE(hasLine(text, "# TYPE vllm:time_to_first_token_seconds "
                            "histogram"));
  EXPECT_TRUE(hasLine(text, "vllm:time_to_first_token_seconds_bucket{" + label +
                                ",le=\"0.02\"} 0.0"));
  EXPECT_TRUE(hasLine(text, "vllm:time_to_first_token_seconds_bucket{" + label +
                                ",le=\"0.04\"} 1.0"));
  EXPECT_TRUE(hasLine(text, "vllm:time_to_first_token_seconds_count{" + label +
                                "} 1.0"));
  EXPECT_TRUE(hasLine(text, "# TYPE vllm:inter_token_latency_seconds "
                            "histogram"));
  EXPECT_TRUE(hasLine(text, "vllm:inter_token_latency_seconds_bucket{" + label +
                                ",le=\"0.025\"} 1.0"));
  EXPECT_TRUE(hasLine(text, "vllm:inter_token_latency_seconds_bucket{" + label +
                                ",le=\"0.05\"} 2.0"));
  EXPECT_TRUE(hasLine(text, "vllm:inter_token_latency_seconds_count{" + label +
                                "} 3.0"));
  EXPECT_TRUE(hasLine(text, "vllm:e2e_request_latency_seconds_bucket{" + label +
                                ",le=\"0.3\"} 1.0"));
  EXPECT_TRUE(hasLine(text, "vllm:e2e_request_latency_seconds_bucket{" + label +
                                ",le=\"1.5\"} 2.0"));
  EXPECT_TRUE(hasLine(text, "vllm:e2e_request_latency_seconds_bucket{" + label +
                                ",le=\"+Inf\"} 2.0"));
  EXPECT_TRUE(
      hasLine(text, "vllm:e2e_request_latency_seconds_sum{" + label + "} 1.3"));
  EXPECT_TRUE(hasLine(text, "vllm:e2e_request_latency_seconds_count{" + label +
                                "} 2.0"));
}

TEST(ServerMetrics, RendersSpancCountersBesideVllms) {
  ServerMetrics metrics("m", 16, 64);
  EngineLoad load;
  load.blocksEvicted = 9;
  metrics.setLoad(load);
  FinishedRequest request;
  request.promptTokens = 80;
  request.cacheQueries = 80;
  request.cacheHits = 48;
  request.spanTokensReused = 32;
  request.spanTokensRelocated = 16;
  request.reasons = {FinishReason::Stop};
  metrics.recordFinished(request);
  request.spanTokensRelocated = 0;
  metrics.recordFinished(request);
  std::string text = metrics.render();
  for (const char *counter :
       {"spanc:span_tokens_reused_total", "spanc:span_tokens_relocated_total",
        "spanc:blocks_evicted_total"}) {
    EXPECT_TRUE(hasLine(text, std::string("# TYPE ") + counter + " counter"))
        << counter;
    EXPECT_NE(text.find(std::string("# HELP ") + counter + " "),
              std::string::npos)
        << counter;
  }
  EXPECT_TRUE(
      hasLine(text, "spanc:span_tokens_reused_total{model_name=\"m\"} 64.0"));
  EXPECT_TRUE(hasLine(
      text, "spanc:span_tokens_relocated_total{model_name=\"m\"} 16.0"));
  // The pool's count is a total already: set, not added.
  metrics.setLoad(load);
  EXPECT_TRUE(hasLine(metrics.render(),
                      "spanc:blocks_evicted_total{model_name=\"m\"} 9.0"));
}

TEST(ServerMetrics, EveryFamilyHasOneHelpAndOneTypeLine) {
  std::string text = ServerMetrics("m", 16, 64).render();
  std::istringstream lines(text);
  std::vector<std::string> helps, types;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0)
      helps.push_back(line.substr(7, line.find(' ', 7) - 7));
    else if (line.rfind("# TYPE ", 0) == 0)
      types.push_back(line.substr(7, line.find(' ', 7) - 7));
    else
      // Every sample belongs to the family declared last.
      EXPECT_EQ(line.rfind(types.back(), 0), 0u) << line;
  }
  EXPECT_EQ(helps, types);
  std::vector<std::string> unique = types;
  std::sort(unique.begin(), unique.end());
  EXPECT_EQ(std::unique(unique.begin(), unique.end()), unique.end());
  EXPECT_EQ(types.size(), 18u);
}

TEST(ServerMetrics, KvEventFamiliesOnlyWithAPublisher) {
  ServerMetrics metrics("m", 16, 64);
  EngineLoad load;
  load.cachedBlocks = 12;
  metrics.setLoad(load);
  std::string off = metrics.render();
  EXPECT_NE(off.find("spanc:kv_cached_blocks{model_name=\"m\"} 12"),
            std::string::npos);
  EXPECT_EQ(off.find("spanc:kv_events_total"), std::string::npos);
  metrics.setKvEventSource([] { return KvEventTotals{3, 40, 5, 1}; });
  std::string on = metrics.render();
  EXPECT_NE(on.find("spanc:kv_event_batches_total{model_name=\"m\"} 3"),
            std::string::npos);
  EXPECT_NE(on.find("spanc:kv_events_total{model_name=\"m\"} 40"),
            std::string::npos);
  EXPECT_NE(on.find("spanc:kv_events_dropped_total{model_name=\"m\"} 5"),
            std::string::npos);
  EXPECT_NE(on.find("spanc:kv_event_replays_total{model_name=\"m\"} 1"),
            std::string::npos);
}

TEST(Histogram, ABoundaryValueFallsInItsOwnBucket) {
  Histogram histogram({1.0, 2.0});
  histogram.observe(1.0);
  histogram.observe(2.5);
  std::string text;
  histogram.render("h", "a=\"b\"", text);
  EXPECT_EQ(text, "h_bucket{a=\"b\",le=\"1.0\"} 1.0\n"
                  "h_bucket{a=\"b\",le=\"2.0\"} 1.0\n"
                  "h_bucket{a=\"b\",le=\"+Inf\"} 2.0\n"
                  "h_sum{a=\"b\"} 3.5\n"
                  "h_count{a=\"b\"} 2.0\n");
}

} // namespace
} // namespace spanc::server
