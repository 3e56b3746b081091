//===- ReadBandwidth.cpp - How fast the cores can stream a model's weights ===//
//
// Decode reads every weight once per token, so the host's read bandwidth is
// its floor: this bench reads a buffer of the given size (default 96.5 MB,
// what SmolLM2-135M Q4_1 reads a token: 63.3 MiB of Q4_1 layers and the
// 28.7 MiB Q8_0 output head, `spanc model info`) with 1..threads threads,
// each thread its own contiguous share as 1, 2 or 4 interleaved streams
// (AVX-512 loads, or AVX2 ones on CPUs without AVX-512, a software prefetch 4
// KiB ahead into L1 or into L2, as the GEMV does on Intel and AMD hosts), and
// prints the best of the repetitions per row as a markdown table, with the time
// a token would take at that rate.
//
//   read_bandwidth_bench [megabytes] [repetitions] [threads]
//                                                 (defaults 96.5 15 2)
//
//===----------------------------------------------------------------------===//

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

constexpr size_t kLine = 64;
constexpr size_t kPrefetchBytes = 4096;

/// Reads [begin, begin + bytes) as `streams` equal parts in turn, 128 bytes
/// of each, prefetching with `Hint`; returns a value that depends on every
/// byte read.
template <auto Hint>
__attribute__((target("avx512f"))) float
readStreamsAvx512(const char *begin, size_t bytes, int streams) {
  const size_t part = bytes / size_t(streams) / 128 * 128;
  __m512 sums[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (size_t offset = 0; offset < part; offset += 128)
    for (int stream = 0; stream < streams; ++stream) {
      const char *at = begin + size_t(stream) * part + offset;
      _mm_prefetch(at + kPrefetchBytes, Hint);
      _mm_prefetch(at + kPrefetchBytes + kLine, Hint);
      sums[stream] = _mm512_add_ps(
          sums[stream], _mm512_load_ps(reinterpret_cast<const float *>(at)));
      sums[stream] = _mm512_add_ps(
          sums[stream],
          _mm512_load_ps(reinterpret_cast<const float *>(at + kLine)));
    }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(sums[0], sums[1]),
                                       _mm512_add_ps(sums[2], sums[3])));
  float total = 0;
  for (float lane : lanes)
    total += lane;
  return total;
}

/// readStreamsAvx512 with 32-byte loads, for CPUs without AVX-512 (the
/// AVX2 GEMV's loads).
template <auto Hint>
__attribute__((target("avx2"))) float
readStreamsAvx2(const char *begin, size_t bytes, int streams) {
  const size_t part = bytes / size_t(streams) / 128 * 128;
  __m256 sums[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                    _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (size_t offset = 0; offset < part; offset += 128)
    for (int stream = 0; stream < streams; ++stream) {
      const char *at = begin + size_t(stream) * part + offset;
      _mm_prefetch(at + kPrefetchBytes, Hint);
      _mm_prefetch(at + kPrefetchBytes + kLine, Hint);
      for (size_t step = 0; step < 128; step += 32)
        sums[stream] = _mm256_add_ps(
            sums[stream],
            _mm256_load_ps(reinterpret_cast<const float *>(at + step)));
    }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]),
                                       _mm256_add_ps(sums[2], sums[3])));
  float total = 0;
  for (float lane : lanes)
    total += lane;
  return total;
}

template <auto Hint>
float readStreams(bool avx512, const char *begin, size_t bytes, int streams) {
  return avx512 ? readStreamsAvx512<Hint>(begin, bytes, streams)
                : readStreamsAvx2<Hint>(begin, bytes, streams);
}

} // namespace

int main(int argc, char **argv) {
  const double megabytes = argc > 1 ? std::atof(argv[1]) : 96.5;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 15;
  const int maxThreads = argc > 3 ? std::atoi(argv[3]) : 2;
  if (!(megabytes > 0 && megabytes <= 65536) || repetitions < 1 ||
      maxThreads < 1 || maxThreads > 256) {
    std::fprintf(stderr, "usage: read_bandwidth_bench [megabytes (0, 65536]] "
                         "[repetitions >= 1] [threads 1-256]\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx2")) {
    std::fprintf(stderr, "read_bandwidth_bench: needs AVX2\n");
    return 1;
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const size_t bytes = size_t(megabytes * 1e6) / 4096 * 4096;
  // Room for the prefetches past the end.
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char *>(std::aligned_alloc(4096, bytes + 2 * kPrefetchBytes)),
      &std::free);
  if (!buffer) {
    std::fprintf(stderr, "read_bandwidth_bench: cannot allocate %zu bytes\n",
                 bytes);
    return 1;
  }
  std::memset(buffer.get(), 1, bytes + 2 * kPrefetchBytes);

  std::printf("Reading %.1f MB with %s loads, best of %d repetitions\n\n",
              bytes / 1e6, avx512 ? "AVX-512" : "AVX2", repetitions);
  std::printf("| threads | streams a thread | prefetch into | GB/s | ms to "
              "read it once |\n");
  std::printf("|---:|---:|---|---:|---:|\n");
  float sink = 0;
  for (int threads = 1; threads <= maxThreads; ++threads)
    for (int streams : {1, 2, 4})
      for (bool toL2 : {false, true}) {
        double best = 1e30;
        for (int repetition = 0; repetition < repetitions; ++repetition) {
          const auto start = std::chrono::steady_clock::now();
          float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
          {
            const size_t share =
                bytes / size_t(omp_get_num_threads()) / 4096 * 4096;
            const char *begin =
                buffer.get() + size_t(omp_get_thread_num()) * share;
            total +=
                toL2 ? readStreams<_MM_HINT_T1>(avx512, begin, share, streams)
                     : readStreams<_MM_HINT_T0>(avx512, begin, share, streams);
          }
          best = std::min(best, std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
          sink += total;
        }
        std::printf("| %d | %d | %s | %.1f | %.2f |\n", threads, streams,
                    toL2 ? "L2" : "L1", bytes / best / 1e9, best * 1e3);
      }
  // Keeps the reads from being optimized away.
  return sink == 12345.0f ? 3 : 0;
}
