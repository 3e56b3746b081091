//===- RelocationBench.cpp - ReRoPE relocation throughput (CIDRA steps) ---===//
//
// For the SmolLM2-135M KV shape (30 layers, 3 KV heads, head dim 64, block
// 16, KvStorage's layout; f16 elements, the default, and f32 for comparison
// in the same run) this measures one scheduler step's relocation
// the way the runtime does it: R requests are admitted, each reusing a cached
// 512-token span at a new offset, KvCacheManager::planStep builds the CIDRA
// plan, RelocationExecutor applies it. Two workloads:
//   distinct: R different spans, each turned in place (R x 32 blocks);
//   shared:   one span wanted by all R requests at R offsets in one step
//             (1 turned in place + R-1 duplicated: copy + turn).
// Throughput = relocated tokens / (plan + kernel time). Each repetition
// first streams a buffer larger than the L3 cache so the blocks come from
// memory ("cold"), unless --warm. Prints a table; --tsv=FILE writes rows.
// The 2-thread rows run right after the 1-thread rows of the same workload,
// so their ratio is taken under the same machine load.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/backend/cpu/RelocationExecutor.h"
#include "runtime/kv/KvCacheManager.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

using namespace spanc;
using namespace spanc::kv;
using namespace spanc::backend;

namespace {

constexpr int NumLayers = 30, NumKvHeads = 3, HeadDim = 64, BlockSize = 16;
constexpr int MaxSpanTokens = 512;
/// Tokens per span (--span-tokens; 512 by default, at most MaxSpanTokens).
int spanTokens = MaxSpanTokens;
constexpr int MaxRequests = 16;
// 16 distinct spans (512 blocks) + per-request prefix/tail + 15 copies.
constexpr int NumBlocks = 16 * 32 + 4 * MaxRequests + 15 * 32 + 32;

double nowMs() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(
             Clock::now().time_since_epoch())
      .count();
}

/// CPU time of the whole process (all threads): on a shared machine the
/// single-thread figure from it excludes time spent preempted.
double cpuMs() {
  timespec time;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
  return double(time.tv_sec) * 1e3 + double(time.tv_nsec) * 1e-6;
}

/// Evicts the caches: streams a buffer larger than the L3.
void flushCaches(std::vector<char> &buffer) {
  volatile char sink = 0;
  for (size_t i = 0; i < buffer.size(); i += 64) {
    buffer[i] = char(buffer[i] + 1);
    sink = sink + buffer[i];
  }
}

struct Sample {
  double planMs = 0;
  double kernelMs = 0;
  double cpuMs = 0; ///< plan + kernel, all threads
  size_t tokens = 0;
  unsigned copies = 0, inPlace = 0, batches = 0;
};

std::vector<TokenId> document(int index) {
  std::vector<TokenId> tokens(static_cast<size_t>(spanTokens));
  for (int i = 0; i < spanTokens; ++i)
    tokens[size_t(i)] = 1000 + index * MaxSpanTokens + i;
  return tokens;
}

struct Bench {
  std::unique_ptr<KvStorage> storage;
  BlockPool pool{NumBlocks, BlockSize};
  KvCacheManager manager{pool, BlockHasher("smollm2-135m-bench"),
                         CacheMode::Span, RelocationMode::Rerope};
  cpu::RopeConfig rope;
  std::unique_ptr<RelocationExecutor> executor;
  RequestId nextId = 1;
  int step = 0;

  explicit Bench(cpu::KvPrecision precision) {
    KvStorageConfig config{NumLayers, NumKvHeads, HeadDim,  BlockSize,
                           NumBlocks, true,       precision};
    auto created = KvStorage::create(config);
    if (!created) {
      std::fprintf(stderr, "%s\n", llvm::toString(created.takeError()).c_str());
      std::exit(1);
    }
    storage = std::move(*created);
    // Touch every page with non-trivial values (mmap pages start as the
    // shared zero page, which would make the first writes page faults).
    const bool half = precision == cpu::KvPrecision::F16;
    for (int layer = 0; layer < NumLayers; ++layer)
      for (int64_t block = 0; block < NumBlocks; ++block)
        for (int head = 0; head < NumKvHeads; ++head)
          for (int i = 0; i < HeadDim * BlockSize; ++i) {
            float key = float((i * 7 + block) % 13) * 0.1f - 0.6f;
            float value = float((i * 5 + layer) % 11) * 0.1f - 0.5f;
            if (half) {
              storage->keys<uint16_t>(layer, block, head)[i] =
                  cpu::floatToHalf(key);
              storage->values<uint16_t>(layer, block, head)[i] =
                  cpu::floatToHalf(value);
            } else {
              storage->keys<float>(layer, block, head)[i] = key;
              storage->values<float>(layer, block, head)[i] = value;
            }
          }
    rope.headDim = HeadDim;
    rope.rotaryDim = HeadDim;
    rope.theta = 100000.0f;
    executor = std::make_unique<RelocationExecutor>(*storage, rope);
    // Compute (here: just commit) the 16 spans once so they are cached.
    for (int index = 0; index < MaxRequests; ++index) {
      RequestId id = nextId++;
      admitOrDie(
          id, {{SegmentKind::Span, document(index)}, {SegmentKind::Tail, {1}}});
      consume(manager.planStep());
      manager.commitPrefill(id);
      manager.release(id);
    }
  }

  void admitOrDie(RequestId id, const std::vector<Segment> &segments) {
    AdmitResult result = manager.admit(id, segments);
    if (result.status != AdmitStatus::Admitted) {
      std::fprintf(stderr, "admission failed: %s\n", result.reason.c_str());
      std::exit(1);
    }
  }

  StepPlan consume(llvm::Expected<StepPlan> plan) {
    if (!plan) {
      std::fprintf(stderr, "%s\n", llvm::toString(plan.takeError()).c_str());
      std::exit(1);
    }
    return std::move(*plan);
  }

  /// One step of `numRequests` requests; `shared`: all use span 0.
  Sample run(int numRequests, bool shared, bool scalar) {
    // Offsets differ from the previous step's, so every reuse relocates.
    const int shift = 1 + (step++ % 2) * 64;
    llvm::SmallVector<RequestId, 16> ids;
    for (int index = 0; index < numRequests; ++index) {
      RequestId id = nextId++;
      std::vector<TokenId> prefix(static_cast<size_t>(shift + index), 7);
      admitOrDie(id, {{SegmentKind::Prefix, prefix},
                      {SegmentKind::Span, document(shared ? 0 : index)},
                      {SegmentKind::Tail, {2}}});
      ids.push_back(id);
    }
    Sample sample;
    double cpuStart = cpuMs();
    double start = nowMs();
    StepPlan plan = consume(manager.planStep());
    double planned = nowMs();
    for (const auto &batch : plan.relocation.batches) {
      if (scalar) {
        std::vector<cpu::RelocationOp> ops;
        for (const RelocationOp &op : batch)
          ops.push_back({op.source, op.destination, op.delta});
        cpu::relocateBlocksScalar(executor->layout(), executor->rotation(),
                                  keyLayers().data(), valueLayers().data(),
                                  ops);
      } else {
        executor->apply(batch);
      }
    }
    double done = nowMs();
    sample.cpuMs = cpuMs() - cpuStart;
    manager.finishStep(plan);
    sample.planMs = planned - start;
    sample.kernelMs = done - planned;
    for (const auto &batch : plan.relocation.batches)
      for (const RelocationOp &op : batch)
        sample.tokens += pool.numTokens(op.destination);
    sample.copies = plan.relocation.numCopies;
    sample.inPlace = plan.relocation.numInPlace;
    sample.batches = unsigned(plan.relocation.batches.size());
    for (RequestId id : ids)
      manager.release(id);
    return sample;
  }

  std::vector<void *> keyLayers() {
    std::vector<void *> layers;
    for (int layer = 0; layer < NumLayers; ++layer)
      layers.push_back(storage->keyData(layer, 0, 0));
    return layers;
  }
  std::vector<void *> valueLayers() {
    std::vector<void *> layers;
    for (int layer = 0; layer < NumLayers; ++layer)
      layers.push_back(storage->valueData(layer, 0, 0));
    return layers;
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

} // namespace

int main(int argc, char **argv) {
  int repetitions = 9;
  bool warm = false;
  std::string tsvPath;
  std::vector<int> requestCounts = {1, 2, 4, 8, 16};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--reps=", 0) == 0)
      repetitions = std::max(1, std::atoi(arg.c_str() + 7));
    else if (arg == "--warm")
      warm = true;
    else if (arg.rfind("--tsv=", 0) == 0)
      tsvPath = arg.substr(6);
    else if (arg.rfind("--span-tokens=", 0) == 0)
      spanTokens = std::clamp(std::atoi(arg.c_str() + 14), 1, MaxSpanTokens);
    else if (arg.rfind("--requests=", 0) == 0)
      requestCounts = {std::clamp(std::atoi(arg.c_str() + 11), 1, MaxRequests)};
    else if (arg == "--quick")
      requestCounts = {1, 4}, repetitions = 3;
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps=N] [--warm] [--tsv=FILE] [--quick] "
                   "[--span-tokens=N] [--requests=N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<char> flushBuffer(warm ? 0 : size_t(384) << 20, 1);
  std::FILE *tsv = tsvPath.empty() ? nullptr : std::fopen(tsvPath.c_str(), "w");
  if (!tsvPath.empty() && !tsv) {
    std::fprintf(stderr, "cannot write %s\n", tsvPath.c_str());
    return 1;
  }
  if (tsv)
    std::fprintf(tsv, "workload\tpath\tthreads\trequests\ttokens\tcopies\t"
                      "in_place\tbatches\tplan_ms\tkernel_ms\ttokens_per_ms\t"
                      "tokens_per_ms_min\ttokens_per_ms_max\t"
                      "cpu_tokens_per_ms\n");
  std::printf(
      "SmolLM2 KV shape: %d layers x %d KV heads x head dim %d, block "
      "%d; path avx512/scalar: f16 K/V (the default), avx512-f32: f32 K/V; "
      "span %d tokens; %s; %d repetitions (median, "
      "[min, max])\n\n",
      NumLayers, NumKvHeads, HeadDim, BlockSize, spanTokens,
      warm ? "warm caches" : "cold (L3 flushed per repetition)", repetitions);
  std::printf("| workload | path | threads | requests | tokens | copies | "
              "batches | plan ms | kernel ms | tokens/ms (wall) | tokens/ms "
              "(CPU time) |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
  struct Config {
    cpu::KvPrecision precision;
    const char *workload;
    const char *path;
    int threads;
    /// Requests this row is run for (empty: all of requestCounts).
    std::vector<int> only;
  };
  // Per precision, per workload and request count, 1 then 2 threads back to
  // back (their ratio under the same load), then the scalar reference.
  const cpu::KvPrecision precisions[] = {cpu::KvPrecision::F16,
                                         cpu::KvPrecision::F32};
  for (cpu::KvPrecision precision : precisions) {
    const bool half = precision == cpu::KvPrecision::F16;
    Bench bench(precision);
    for (const char *workload : {"distinct", "shared"}) {
      std::vector<Config> configs = {
          {precision, workload, half ? "avx512" : "avx512-f32", 1, {}},
          {precision, workload, half ? "avx512" : "avx512-f32", 2, {}}};
      if (half && std::strcmp(workload, "distinct") == 0)
        configs.push_back({precision, workload, "scalar", 1, {1, 4}});
      for (int requests : requestCounts)
        for (const Config &config : configs) {
          if (!config.only.empty() &&
              std::find(config.only.begin(), config.only.end(), requests) ==
                  config.only.end())
            continue;
          omp_set_num_threads(config.threads);
          const bool shared = std::strcmp(config.workload, "shared") == 0;
          const bool scalar = std::strcmp(config.path, "scalar") == 0;
          bench.run(requests, shared, scalar); // warm-up (page tables, code)
          std::vector<double> throughputs, plans, kernels, cpuThroughputs;
          Sample last;
          for (int rep = 0; rep < repetitions; ++rep) {
            if (!warm)
              flushCaches(flushBuffer);
            last = bench.run(requests, shared, scalar);
            throughputs.push_back(double(last.tokens) /
                                  (last.planMs + last.kernelMs));
            cpuThroughputs.push_back(double(last.tokens) / last.cpuMs);
            plans.push_back(last.planMs);
            kernels.push_back(last.kernelMs);
          }
          double best =
              *std::max_element(throughputs.begin(), throughputs.end());
          double worst =
              *std::min_element(throughputs.begin(), throughputs.end());
          // CPU time only means something for one thread (idle OpenMP
          // threads spin and are counted too).
          char cpuText[32] = "-";
          if (config.threads == 1)
            std::snprintf(cpuText, sizeof(cpuText), "%.0f",
                          median(cpuThroughputs));
          std::printf("| %s | %s | %d | %d | %zu | %u | %u | %.3f | %.3f | "
                      "%.0f [%.0f, %.0f] | %s |\n",
                      config.workload, config.path, config.threads, requests,
                      last.tokens, last.copies, last.batches, median(plans),
                      median(kernels), median(throughputs), worst, best,
                      cpuText);
          std::fflush(stdout);
          if (tsv)
            std::fprintf(tsv,
                         "%s\t%s\t%d\t%d\t%zu\t%u\t%u\t%u\t%.4f\t%.4f\t"
                         "%.1f\t%.1f\t%.1f\t%.1f\n",
                         config.workload, config.path, config.threads, requests,
                         last.tokens, last.copies, last.inPlace, last.batches,
                         median(plans), median(kernels), median(throughputs),
                         worst, best,
                         config.threads == 1 ? median(cpuThroughputs) : 0.0);
        }
    }
  }
  if (tsv)
    std::fclose(tsv);
  return 0;
}
