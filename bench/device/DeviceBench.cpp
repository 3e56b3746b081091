//===- DeviceBench.cpp - spanc bench device: prefill and relocation rates
//--===//
//
// What a backend does per second, on whichever device --device names, for
// bench/gpu.sh's figures at the paper's scale:
//
// - prefill: one sequence of N new tokens (a fresh page list, the last
//   row's logits) per repetition; tokens/s and the FLOP rate its GEMMs and
//   causal attention imply (2 FLOP per weight per token, 4 * headDim per
//   query-key pair per head), against a bf16 roofline (setting
//   roofline-tflops, 790: the 8192^3 bf16 product measured on the H200);
// - relocation: one CIDRA batch of B independent ReRoPE moves (block i to
//   block B + i, turned by a delta), timed to Backend::synchronize;
//   tokens/ms = B * blockSize / ms (the paper reports ~500);
// - where a prefill's time goes: one more pass per length with the
//   backend's op timers on (Backend::setProfiling: CUDA events around each
//   op on the GPU, wall time on the CPU), split into attention, the GEMMs,
//   the other layer ops and the output head.
//
// Writes bench/results/device-<device>.md and .tsv.
//
//===----------------------------------------------------------------------===//

#include "bench/common/Bench.h"
#include "bench/common/ModelSession.h"
#include "bench/common/Report.h"
#include "runtime/backend/BackendFactory.h"
#include "runtime/model/Model.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>

namespace spanc::bench {

namespace {

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

llvm::Error runDeviceBench(const BenchArgs &args) {
  auto lengths = args.intListSetting(
      "tokens", args.quick ? llvm::ArrayRef<int64_t>{128}
                           : llvm::ArrayRef<int64_t>{512, 2048, 8192});
  if (!lengths)
    return lengths.takeError();
  auto opCounts = args.intListSetting(
      "moves", args.quick ? llvm::ArrayRef<int64_t>{16}
                          : llvm::ArrayRef<int64_t>{64, 512, 4096});
  if (!opCounts)
    return opCounts.takeError();
  auto roofline = args.intSetting("roofline-tflops", 790);
  if (!roofline)
    return roofline.takeError();
  const int repetitions = args.repetitionsOr(5, 1);
  constexpr unsigned kBlockSize = 16;

  model::ModelOptions modelOptions;
  modelOptions.hostWeights = args.device == backend::Device::Cpu;
  auto loaded = model::Model::load(args.modelPath, modelOptions);
  if (!loaded)
    return loaded.takeError();
  model::Model &model = **loaded;
  const model::ModelConfig &config = model.config();
  const int64_t longest = *std::max_element(lengths->begin(), lengths->end());
  const int64_t mostMoves =
      *std::max_element(opCounts->begin(), opCounts->end());
  if (longest > int64_t(config.contextLength))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "tokens=%lld exceeds the context (%u)",
                                   (long long)longest, config.contextLength);
  const int64_t numBlocks = std::max<int64_t>(
      (longest + kBlockSize - 1) / kBlockSize + 1, 2 * mostMoves);

  std::string tsv = "test\tsize\trepetition\tseconds\trate\n";
  std::string table, opTable;
  llvm::raw_string_ostream out(table), ops(opTable);
  ops << "| prefill tokens | ms (timed pass) | attention | GEMMs | other layer "
         "ops | output head | outside the ops | attention TFLOP/s | GEMM "
         "TFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n";
  out << "| prefill tokens | tokens/s | ms | TFLOP/s | share of " << *roofline
      << " TFLOP/s |\n|---|---|---|---|---|\n";
  backend::BackendOptions options;
  options.device = args.device;
  options.blockSize = kBlockSize;
  options.numBlocks = numBlocks;
  options.keysRotated = false;
  auto made = backend::createBackend(model, options);
  if (!made)
    return made.takeError();
  backend::Backend &device = **made;
  for (int64_t length : *lengths) {
    std::vector<int32_t> tokens(static_cast<size_t>(length)),
        positions(static_cast<size_t>(length));
    std::vector<int32_t> blocks, valid;
    for (int64_t index = 0; index < length; ++index) {
      tokens[size_t(index)] =
          int32_t((index * 7919 + 17) % int64_t(config.vocabSize));
      positions[size_t(index)] = int32_t(index);
      if (index % kBlockSize == 0) {
        blocks.push_back(int32_t(index / kBlockSize));
        valid.push_back(0);
      }
      ++valid.back();
    }
    model::ForwardSequence sequence{tokens,
                                    positions,
                                    blocks,
                                    valid,
                                    model::LogitsRequest::Last,
                                    model::RowKind::Prompt};
    model::ForwardOutput output;
    // One untimed run: cuBLASLt's heuristics, first-touch allocations.
    if (llvm::Error error = device.forward(sequence, output))
      return error;
    std::vector<double> times;
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      auto start = std::chrono::steady_clock::now();
      if (llvm::Error error = device.forward(sequence, output))
        return error;
      times.push_back(seconds(start));
      tsv += printed("prefill\t%lld\t%d\t%.6f\t%.1f\n", (long long)length,
                     repetition, times.back(), double(length) / times.back());
    }
    // The op profile: one more pass, timed by op (the timers cost a little,
    // so it is not one of the repetitions above).
    device.resetProfile();
    device.setProfiling(true);
    auto profiledStart = std::chrono::steady_clock::now();
    llvm::Error profiled = device.forward(sequence, output);
    const double profiledSeconds = seconds(profiledStart);
    device.setProfiling(false);
    if (profiled)
      return profiled;
    const backend::ForwardProfile profile = device.profile();
    // The pass's own counts: the query-key pairs and token rows of its
    // layers.
    const double attentionFlops = profile.attentionFlops(config);
    const double gemmFlops = profile.gemmFlops(config);
    auto share = [&](double part) {
      return printed("%.1f ms (%.0f%%)", 1e3 * part,
                     100.0 * part / std::max(profiledSeconds, 1e-12));
    };
    ops << "| " << length << " | " << printed("%.1f", 1e3 * profiledSeconds)
        << " | " << share(profile.attentionSeconds) << " | "
        << share(profile.gemmSeconds()) << " | "
        << share(profile.otherLayerSeconds() + profile.embeddingSeconds)
        << " | " << share(profile.outputHeadSeconds) << " | "
        << share(std::max(0.0, profiledSeconds - profile.total())) << " | "
        << printed("%.1f",
                   profile.attentionSeconds > 0
                       ? attentionFlops / profile.attentionSeconds / 1e12
                       : 0.0)
        << " | "
        << printed("%.1f", profile.gemmSeconds() > 0
                               ? gemmFlops / profile.gemmSeconds() / 1e12
                               : 0.0)
        << " |\n";
    tsv += printed("profile\t%lld\t0\t%.6f\t%.6f\t%.6f\t%.6f\n",
                   (long long)length, profiledSeconds, profile.attentionSeconds,
                   profile.gemmSeconds(), profile.otherLayerSeconds());
    Summary summary = summarize(times);
    const double tflops = config.prefillFlops(length) / summary.median / 1e12;
    out << llvm::format("| %lld | %.0f | %.2f [%.2f, %.2f] | %.1f | %.1f%% |\n",
                        (long long)length, double(length) / summary.median,
                        1e3 * summary.median, 1e3 * summary.min,
                        1e3 * summary.max, tflops,
                        100.0 * tflops / double(*roofline));
  }
  made->reset();

  out << "\n| relocation moves (one batch) | tokens | ms | tokens/ms |\n"
         "|---|---|---|---|\n";
  options.keysRotated = true;
  auto rotated = backend::createBackend(model, options);
  if (!rotated)
    return rotated.takeError();
  for (int64_t moves : *opCounts) {
    kv::RelocationPlan plan;
    plan.batches.emplace_back();
    for (int64_t op = 0; op < moves; ++op)
      plan.batches.back().push_back(
          kv::RelocationOp{uint32_t(op), uint32_t(moves + op), 37});
    (*rotated)->relocate(plan);
    if (llvm::Error error = (*rotated)->synchronize())
      return error;
    std::vector<double> times;
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      auto start = std::chrono::steady_clock::now();
      (*rotated)->relocate(plan);
      if (llvm::Error error = (*rotated)->synchronize())
        return error;
      times.push_back(seconds(start));
      tsv += printed("relocation\t%lld\t%d\t%.6f\t%.1f\n", (long long)moves,
                     repetition, times.back(),
                     double(moves * kBlockSize) / (1e3 * times.back()));
    }
    Summary summary = summarize(times);
    out << llvm::format("| %lld | %lld | %.3f [%.3f, %.3f] | %.0f |\n",
                        (long long)moves, (long long)(moves * kBlockSize),
                        1e3 * summary.median, 1e3 * summary.min,
                        1e3 * summary.max,
                        double(moves * kBlockSize) / (1e3 * summary.median));
  }

  std::string markdown;
  llvm::raw_string_ostream md(markdown);
  md << "# spanc bench device (" << backend::deviceName(args.device) << ")\n\n"
     << timestampNow() << ", " << describeMachine() << "\n\n"
     << "Model: " << llvm::sys::path::filename(args.modelPath) << " ("
     << config.numLayers << " layers, dim " << config.embeddingDim << ", heads "
     << config.numHeads << "/" << config.numKvHeads << ", FFN "
     << config.feedForwardDim << ", vocab " << config.vocabSize
     << "); block size " << kBlockSize << "; " << repetitions
     << " repetitions after one untimed run; median [min, max].\n\n"
     << table
     << "\n## Where a prefill's time goes\n\nOne more pass per length with "
        "the backend's op timers on (CUDA events around each op on the GPU; "
        "wall time on the CPU), so its total is a little above the "
        "median's; other layer ops include the embedding. TFLOP/s: the "
        "attention's and the GEMMs' FLOPs over their own time.\n\n"
     << opTable << "\nCommand: spanc bench device --device="
     << backend::deviceName(args.device) << commandLine(args) << "\n";
  const std::string base = "device-" + backend::deviceName(args.device).str();
  llvm::SmallString<256> mdPath(args.resultsDir), tsvPath(args.resultsDir);
  llvm::sys::path::append(mdPath, base + ".md");
  llvm::sys::path::append(tsvPath, base + ".tsv");
  if (llvm::Error error = writeTextFile(tsvPath, tsv))
    return error;
  if (llvm::Error error = writeTextFile(mdPath, markdown))
    return error;
  llvm::outs() << markdown;
  return llvm::Error::success();
}

BenchRegistration registration{
    {"device",
     "prefill tokens/s (share of the bf16 roofline) and ReRoPE relocation "
     "tokens/ms of the backend --device names",
     "tokens=512,2048,8192: prefill lengths\n"
     "moves=64,512,4096: relocation moves in one batch\n"
     "roofline-tflops=790: the bf16 GEMM ceiling the share is of\n",
     runDeviceBench}};

} // namespace

} // namespace spanc::bench
