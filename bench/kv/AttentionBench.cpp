//===- AttentionBench.cpp - Attention cost: rope-in-kernel vs rotated K ---===//
//
// The paged attention kernel alone, for one layer of the SmolLM2-135M shape
// (9 query heads, 3 KV heads, head dim 64, block 16), over K stored rotated
// (what ReRoPE keeps: attention only reads it) and K stored unrotated
// (rope-in-kernel: attention rotates every key it reads), with f16 and f32
// K/V elements, all in one process, interleaved per repetition so each
// ratio is taken under the same machine load. Shapes:
//   prefill: a fresh 512-token prompt, and 512 new tokens after 1 536
//            cached (a 2k prompt's last chunk);
//   hit:     a 16-token tail over 4 096 cached tokens (a span-cache hit),
//            28 and 56 new tokens after 4 123 and 7 691 (the sizes of the
//            default span mode's hits in bench/rag at 8 and 15 documents),
//            and those hits as they are laid out: each 512-token document
//            but the last recomputes its end block (1-4 tokens, 12 and 40
//            in all) where it sits in the prompt, then the 16-token tail,
//            as one sequence placed by queryIndices;
//   decode:  1 token over 4 096 (batch 1) and 8 sequences x 1 over 2 048.
// Prints medians with [min, max] of the kernel wall time per call and the
// rope-in-kernel / rotated ratio; --threads=N (default 1) sets OpenMP
// threads, --reps=N repetitions, --only=TEXT runs the shapes whose name
// holds TEXT. A second table times the K/V write of a
// 512-token prefill chunk (one layer): KvStorage::writeTokens into f16 and
// f32 storage against the per-token scalar transposing store the forward
// pass used before (f32 storage, K/V rounded to f16 first).
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/QuantGemv.h"
#include "runtime/kernels/cpu/Rope.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace spanc;

namespace {

constexpr int NumQueryHeads = 9, NumKvHeads = 3, HeadDim = 64, BlockSize = 16;

struct Shape {
  const char *name;
  int numSequences;
  int contextTokens; ///< per sequence, new tokens included
  int newTokens;     ///< per sequence
  /// Where set (one sequence): the new tokens are these end blocks, one
  /// at the end of each 512-token document after the prompt's first
  /// tokens, then the tail; else the last newTokens tokens.
  std::vector<int> endBlocks = {};
};

constexpr int DocumentTokens = 512;

/// The logical index of each new token of `shape` (one sequence).
std::vector<int32_t> newTokenIndices(const Shape &shape) {
  std::vector<int32_t> indices;
  int endTokens = 0;
  for (int size : shape.endBlocks)
    endTokens += size;
  const int tail = shape.newTokens - endTokens;
  const int documents = int(shape.endBlocks.size()) + 1;
  const int firstDocument =
      shape.contextTokens - tail - documents * DocumentTokens;
  for (int document = 0; document + 1 < documents; ++document) {
    const int end = firstDocument + (document + 1) * DocumentTokens;
    for (int token = end - shape.endBlocks[size_t(document)]; token < end;
         ++token)
      indices.push_back(token);
  }
  for (int token = shape.contextTokens - tail; token < shape.contextTokens;
       ++token)
    indices.push_back(token);
  return indices;
}

double nowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// One storage variant (precision x K rotated or not), filled with the
/// same random K/V.
struct Variant {
  const char *name;
  cpu::KvPrecision precision;
  bool ropeInKernel;
  std::unique_ptr<backend::KvStorage> storage;
};

} // namespace

int main(int argc, char **argv) {
  int repetitions = 15, threads = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--reps=", 0) == 0)
      repetitions = std::max(1, std::atoi(arg.c_str() + 7));
    else if (arg.rfind("--threads=", 0) == 0)
      threads = std::max(1, std::atoi(arg.c_str() + 10));
    else if (arg.rfind("--only=", 0) == 0)
      only = arg.substr(7);
    else {
      std::fprintf(stderr, "usage: %s [--reps=N] [--threads=N] [--only=TEXT]\n",
                   argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  const Shape shapes[] = {{"prefill 512 (a fresh prompt)", 1, 512, 512},
                          {"prefill 512 after 1536", 1, 2048, 512},
                          {"prefill 512 after 7680", 1, 8192, 512},
                          {"hit: 16-token tail over 4096", 1, 4096 + 16, 16},
                          {"hit: 28-token tail over 4123", 1, 4123 + 28, 28},
                          {"hit: 16-token tail over 7747", 1, 7747 + 16, 16},
                          {"hit: 56-token tail over 7691", 1, 7691 + 56, 56},
                          {"hit: 8 documents' end blocks and tail",
                           1,
                           4151,
                           28,
                           {2, 2, 1, 2, 2, 1, 2}},
                          {"hit: 15 documents' end blocks and tail",
                           1,
                           7747,
                           56,
                           {3, 3, 2, 3, 4, 3, 3, 2, 3, 3, 3, 3, 2, 3}},
                          {"decode 1 over 4096", 1, 4096, 1},
                          {"decode 8 x 1 over 2048", 8, 2048, 1}};
  int64_t maxBlocks = 0;
  for (const Shape &shape : shapes)
    maxBlocks = std::max<int64_t>(
        maxBlocks, int64_t(shape.numSequences) *
                       ((shape.contextTokens + BlockSize - 1) / BlockSize));

  cpu::RopeConfig ropeConfig;
  ropeConfig.headDim = ropeConfig.rotaryDim = HeadDim;
  ropeConfig.theta = 100000.0f;
  cpu::RopeTable ropeTable(ropeConfig, 8192);

  Variant variants[] = {
      {"rotated K, f16", cpu::KvPrecision::F16, false, {}},
      {"rope-in-kernel, f16", cpu::KvPrecision::F16, true, {}},
      {"rotated K, f32", cpu::KvPrecision::F32, false, {}},
      {"rope-in-kernel, f32", cpu::KvPrecision::F32, true, {}}};
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kvWidth = NumKvHeads * HeadDim;
  std::vector<float> rows(size_t(maxBlocks * BlockSize * 2 * kvWidth));
  for (float &x : rows)
    x = normal(random);
  std::vector<int32_t> slotBlocks, slotIndices;
  for (int64_t block = 0; block < maxBlocks; ++block)
    for (int slot = 0; slot < BlockSize; ++slot) {
      slotBlocks.push_back(int32_t(block));
      slotIndices.push_back(slot);
    }
  for (Variant &variant : variants) {
    backend::KvStorageConfig config{1,
                                    NumKvHeads,
                                    HeadDim,
                                    BlockSize,
                                    maxBlocks,
                                    !variant.ropeInKernel,
                                    variant.precision};
    auto storage = backend::KvStorage::create(config);
    if (!storage) {
      std::fprintf(stderr, "%s\n", llvm::toString(storage.takeError()).c_str());
      return 1;
    }
    variant.storage = std::move(*storage);
    variant.storage->writeTokens(
        0, int64_t(slotBlocks.size()), slotBlocks.data(), slotIndices.data(),
        rows.data(), rows.data() + kvWidth, 2 * kvWidth);
  }

  std::printf("Paged attention, one layer of the SmolLM2 shape (%d query / %d "
              "KV heads, head dim %d, block %d), %d thread(s), %d "
              "repetitions: kernel ms per call, median [min, max]\n\n",
              NumQueryHeads, NumKvHeads, HeadDim, BlockSize, threads,
              repetitions);
  std::printf("| shape | rotated K, f16 | rope-in-kernel, f16 | rotated K, "
              "f32 | rope-in-kernel, f32 | rope-in-kernel / rotated (f16) | "
              "f16 / f32 (rotated) | GFLOP/s (rotated / rope, f16) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  cpu::AttentionWorkspace workspace;
  for (const Shape &shape : shapes) {
    if (std::string(shape.name).find(only) == std::string::npos)
      continue;
    const int blocksPerSequence =
        (shape.contextTokens + BlockSize - 1) / BlockSize;
    std::vector<int32_t> queryOffsets = {0}, pageOffsets = {0}, blockIds,
                         validTokens;
    for (int sequence = 0; sequence < shape.numSequences; ++sequence) {
      for (int page = 0; page < blocksPerSequence; ++page) {
        blockIds.push_back(sequence * blocksPerSequence + page);
        validTokens.push_back(
            std::min(BlockSize, shape.contextTokens - page * BlockSize));
      }
      queryOffsets.push_back(queryOffsets.back() + shape.newTokens);
      pageOffsets.push_back(pageOffsets.back() + blocksPerSequence);
    }
    const int totalQueries = queryOffsets.back();
    const int64_t queryWidth = int64_t(NumQueryHeads) * HeadDim;
    std::vector<float> queries(size_t(totalQueries * queryWidth)),
        output(queries.size());
    for (float &x : queries)
      x = normal(random);
    cpu::PagedAttentionShape attentionShape;
    attentionShape.numQueryHeads = NumQueryHeads;
    attentionShape.numKvHeads = NumKvHeads;
    attentionShape.headDim = HeadDim;
    attentionShape.scale = 1.0f / std::sqrt(float(HeadDim));
    attentionShape.queryRowStride = queryWidth;
    attentionShape.outputRowStride = queryWidth;
    cpu::PagedAttentionBatch batch;
    batch.numSequences = shape.numSequences;
    batch.queryOffsets = queryOffsets.data();
    batch.pageOffsets = pageOffsets.data();
    batch.blockIds = blockIds.data();
    batch.validTokens = validTokens.data();
    std::vector<int32_t> indices;
    if (!shape.endBlocks.empty()) {
      indices = newTokenIndices(shape);
      batch.queryIndices = indices.data();
    }
    std::vector<double> times[4];
    for (int rep = 0; rep <= repetitions; ++rep)
      for (int index = 0; index < 4; ++index) {
        Variant &variant = variants[index];
        cpu::PagedAttentionOptions options;
        options.keyRope = variant.ropeInKernel ? &ropeTable : nullptr;
        double start = nowMs();
        cpu::pagedAttention(attentionShape, batch,
                            variant.storage->layerView(0), queries.data(),
                            output.data(), options, workspace);
        double elapsed = nowMs() - start;
        if (rep > 0) // the first round warms code and workspace
          times[index].push_back(elapsed);
      }
    double medians[4];
    std::printf("| %s |", shape.name);
    for (int index = 0; index < 4; ++index) {
      medians[index] = median(times[index]);
      std::printf(" %.3f [%.3f, %.3f] |", medians[index],
                  *std::min_element(times[index].begin(), times[index].end()),
                  *std::max_element(times[index].begin(), times[index].end()));
    }
    // QK^T and PV: 2 FLOPs per multiply-add, query token i of a sequence
    // seeing (context - new + i + 1) keys.
    double keysSeen = 0;
    for (int token = 0; token < shape.newTokens; ++token)
      keysSeen += indices.empty()
                      ? shape.contextTokens - shape.newTokens + token + 1
                      : indices[size_t(token)] + 1;
    const double flops =
        2.0 * 2 * keysSeen * NumQueryHeads * HeadDim * shape.numSequences;
    std::printf(" %.2fx | %.2fx | %.0f / %.0f |\n", medians[1] / medians[0],
                medians[0] / medians[2], flops / medians[0] / 1e6,
                flops / medians[1] / 1e6);
    std::fflush(stdout);
  }

  // The K/V write of one layer for a 512-token chunk (32 full blocks).
  {
    const int64_t count = 512;
    const int64_t rowStride = 2 * kvWidth;
    backend::KvStorageConfig config{
        1,    NumKvHeads,           HeadDim, BlockSize, count / BlockSize,
        true, cpu::KvPrecision::F16};
    auto half = backend::KvStorage::create(config);
    config.precision = cpu::KvPrecision::F32;
    auto full = backend::KvStorage::create(config);
    auto previous = backend::KvStorage::create(config);
    if (!half || !full || !previous) {
      std::fprintf(stderr, "cannot create the K/V write storages\n");
      return 1;
    }
    std::vector<float> chunk(rows.begin(), rows.begin() + count * rowStride);
    std::vector<double> times[3];
    for (int rep = 0; rep <= repetitions; ++rep) {
      double start = nowMs();
      (*half)->writeTokens(0, count, slotBlocks.data(), slotIndices.data(),
                           chunk.data(), chunk.data() + kvWidth, rowStride);
      double halfMs = nowMs() - start;
      start = nowMs();
      (*full)->writeTokens(0, count, slotBlocks.data(), slotIndices.data(),
                           chunk.data(), chunk.data() + kvWidth, rowStride);
      double fullMs = nowMs() - start;
      // The previous path: round each K/V value to f16 in place, then store
      // token by token, K transposed element by element.
      std::vector<float> copy = chunk;
      start = nowMs();
      for (int64_t token = 0; token < count; ++token) {
        float *row = copy.data() + token * rowStride;
        for (int64_t col = 0; col < rowStride; ++col)
          row[col] = cpu::roundToHalf(row[col]);
        for (int head = 0; head < NumKvHeads; ++head) {
          float *keys =
              (*previous)->keys<float>(0, slotBlocks[size_t(token)], head);
          float *values =
              (*previous)->values<float>(0, slotBlocks[size_t(token)], head);
          const int slot = slotIndices[size_t(token)];
          for (int dim = 0; dim < HeadDim; ++dim)
            keys[dim * BlockSize + slot] = row[head * HeadDim + dim];
          std::memcpy(values + slot * HeadDim, row + kvWidth + head * HeadDim,
                      sizeof(float) * HeadDim);
        }
      }
      double previousMs = nowMs() - start;
      if (rep > 0) {
        times[0].push_back(halfMs);
        times[1].push_back(fullMs);
        times[2].push_back(previousMs);
      }
    }
    std::printf("\nK/V write of a 512-token chunk, one layer (ms, median "
                "[min, max]):\n\n| writeTokens, f16 | writeTokens, f32 | "
                "previous: round + per-token scalar store, f32 | previous / "
                "f16 |\n|---:|---:|---:|---:|\n|");
    for (auto &series : times)
      std::printf(" %.3f [%.3f, %.3f] |", median(series),
                  *std::min_element(series.begin(), series.end()),
                  *std::max_element(series.begin(), series.end()));
    std::printf(" %.1fx |\n", median(times[2]) / median(times[0]));
  }
  return 0;
}
