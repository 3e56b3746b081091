//===- BenchCommand.cpp - spanc bench -------------------------------------===//
//
// `spanc bench NAME`: the benchmarks of bench/ (each registers itself in
// bench/common/Bench.h and writes bench/results/NAME.{md,tsv,png}), plus
// `spanc bench engine`, the pp/tg throughput of the CPU engine on a GGUF
// model (llama-bench's protocol), as a table or as JSON for
// bench/engine/run.sh, which runs it beside llama.cpp.
//
//===----------------------------------------------------------------------===//

#include "tools/spanc/CommandLine.h"
#include "tools/spanc/DeviceOption.h"
#include "tools/spanc/GemmOptions.h"
#include "tools/spanc/IsaOption.h"
#include "tools/spanc/LimitsHelp.h"
#include "tools/spanc/ThreadsOption.h"

#include "bench/common/Bench.h"
#include "bench/engine/EngineBench.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Gemm.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <omp.h>

#include <cstdlib>

namespace spanc::cli {

namespace {

void printProfile(llvm::raw_ostream &out, const char *title,
                  const backend::ForwardProfile &profile) {
  double total = profile.total();
  if (total <= 0)
    return;
  out << title << " profile (" << profile.tokens << " tokens, "
      << llvm::format("%.3f", total) << " s in ops):\n";
  struct Row {
    const char *name;
    double seconds;
  } rows[] = {{"embedding", profile.embeddingSeconds},
              {"rmsnorm", profile.normSeconds},
              {"qkv gemm", profile.qkvSeconds},
              {"rope", profile.ropeSeconds},
              {"kv write", profile.kvWriteSeconds},
              {"attention", profile.attentionSeconds},
              {"attn-out gemm", profile.attentionOutputSeconds},
              {"gate|up gemm", profile.gateUpSeconds},
              {"swiglu", profile.swiGluSeconds},
              {"down gemm", profile.downSeconds},
              {"residual", profile.residualSeconds},
              {"output head", profile.outputHeadSeconds}};
  for (const Row &row : rows)
    out << llvm::format("  %-14s %8.2f ms %6.1f%%\n", row.name,
                        row.seconds * 1e3, 100.0 * row.seconds / total);
}

int runEngineBenchmark(const po::variables_map &values) {
  std::optional<backend::Device> device = readDeviceOption("bench", values);
  if (!device)
    return 1;
  if (*device != backend::Device::Cpu)
    return reportError("bench", "engine measures the CPU engine only; on a "
                                "GPU run 'spanc bench device --device=cuda'");
  if (!values.count("model"))
    return reportError("bench", "engine: --model FILE is required");
  bench::EngineBenchOptions options;
  options.modelPath = values["model"].as<std::string>();
  options.promptTokens = values["prompt-tokens"].as<int>();
  options.generateTokens = values["gen-tokens"].as<int>();
  options.generateDepth = values["gen-depth"].as<int>();
  options.prefillChunk = values["prefill-chunk"].as<int>();
  options.repetitions =
      values.count("repetitions") ? values["repetitions"].as<int>() : 5;
  options.forceF32 = values.count("f32") > 0;
  std::optional<cpu::GemmKernel> gemmKernel =
      cpu::parseGemmKernel(values["gemm"].as<std::string>());
  if (!gemmKernel)
    return reportError("bench",
                       "engine: --gemm must be amx, avx512bf16 or onednn");
  options.gemmKernel = *gemmKernel;
  std::optional<GemmChoices> gemmChoices = readGemmOptions("bench", values);
  if (!gemmChoices)
    return 1;
  options.gemmWeightCopy = gemmChoices->weightCopy;
  options.quantizedPrompt = gemmChoices->quantizedPrompt;
  std::optional<model::Numerics> numerics =
      model::parseNumerics(values["numerics"].as<std::string>());
  if (!numerics)
    return reportError("bench", "engine: --numerics must be default or llama");
  options.numerics = *numerics;
  options.profile = values.count("profile") > 0;
  if (values.count("quick")) {
    options.promptTokens = std::min(options.promptTokens, 64);
    options.generateTokens = std::min(options.generateTokens, 16);
    options.generateDepth = std::min(options.generateDepth, 64);
    options.repetitions = 1;
  }
  if (options.promptTokens < 0 || options.generateTokens < 0 ||
      options.generateDepth < 0 || options.prefillChunk < 0 ||
      options.repetitions < 1)
    return reportError("bench", "engine: token counts must be >= 0 and "
                                "repetitions >= 1");
  auto result = bench::runEngineBench(options);
  if (!result)
    return reportError("bench", llvm::toString(result.takeError()));
  const int threads = omp_get_max_threads();
  llvm::raw_ostream &out = llvm::outs();
  double prefill = bench::median(result->prefillTokensPerSecond);
  double decode = bench::median(result->decodeTokensPerSecond);
  double prefillSpread =
      bench::standardDeviation(result->prefillTokensPerSecond);
  double decodeSpread = bench::standardDeviation(result->decodeTokensPerSecond);
  if (values.count("json")) {
    auto list = [](const std::vector<double> &samples) {
      std::string text = "[";
      for (size_t index = 0; index < samples.size(); ++index)
        text += (index ? ", " : "") + std::to_string(samples[index]);
      return text + "]";
    };
    out << "{\"engine\": \"spanc\", \"threads\": " << threads
        << ", \"precision\": \"" << result->precision << "\", \"gemm\": \""
        << result->gemmKernel << "\", \"prompt_int8\": "
        << (result->quantizedPrompt ? "true" : "false") << ", \"isa\": \""
        << cpu::isaLevelName(cpu::isaLevel()) << "\", \"cpu\": \""
        << cpu::cpuFeatures().describe()
        << "\", \"pp_tokens\": " << options.promptTokens
        << ", \"tg_tokens\": " << options.generateTokens
        << ", \"tg_depth\": " << options.generateDepth
        << ", \"pp_flops\": " << llvm::format("%.6g", result->prefillFlops)
        << ", \"pp_samples\": " << list(result->prefillTokensPerSecond)
        << ", \"tg_samples\": " << list(result->decodeTokensPerSecond)
        << ", \"peak_rss_bytes\": " << result->peakRssBytes
        << ", \"load_seconds\": " << result->loadSeconds << "}\n";
    return 0;
  }
  out << "spanc engine: " << options.modelPath << ", " << threads
      << " threads, "
      << (result->quantizedPrompt
              ? std::string("int8 prompt rows on the 4-bit weights")
              : std::string(result->precision) + " GEMMs on " +
                    result->gemmKernel)
      << " (" << cpu::isaLevelName(cpu::isaLevel())
      << " path: " << cpu::cpuFeatures().describe() << "), load "
      << llvm::format("%.2f", result->loadSeconds) << " s\n";
  out << "| test | tokens/s (median) | stddev | reps |\n|---|---|---|---|\n";
  if (options.promptTokens > 0)
    out << llvm::format("| pp%d | %.1f | %.1f | %zu |\n", options.promptTokens,
                        prefill, prefillSpread,
                        result->prefillTokensPerSecond.size());
  if (options.generateTokens > 0) {
    // llama-bench's names: tg128, or tg128 @ d4096 after a context.
    std::string test = "tg" + std::to_string(options.generateTokens);
    if (options.generateDepth > 0)
      test += " @ d" + std::to_string(options.generateDepth);
    out << llvm::format("| %s | %.1f | %.1f | %zu |\n", test.c_str(), decode,
                        decodeSpread, result->decodeTokensPerSecond.size());
  }
  if (options.promptTokens > 0)
    out << llvm::format("pp%d: %.1f GFLOP a pass (GEMMs, causal attention, "
                        "last-token head), %.1f GFLOP/s\n",
                        options.promptTokens, result->prefillFlops / 1e9,
                        result->prefillFlops / 1e9 * prefill /
                            options.promptTokens);
  out << llvm::format("peak RSS %.1f MiB\n",
                      double(result->peakRssBytes) / (1 << 20));
  printProfile(out, "prefill", result->prefillProfile);
  printProfile(out, "decode", result->decodeProfile);
  return 0;
}

/// The repository root: where `bazel run` was started, $SPANC_ROOT, or the
/// first folder up from the working one that holds WORKSPACE and bench/.
std::string findRepoRoot() {
  for (const char *variable : {"BUILD_WORKSPACE_DIRECTORY", "SPANC_ROOT"})
    if (const char *value = std::getenv(variable); value && *value)
      return value;
  llvm::SmallString<256> folder;
  if (!llvm::sys::fs::current_path(folder)) {
    for (llvm::StringRef at = folder; !at.empty();
         at = llvm::sys::path::parent_path(at)) {
      llvm::SmallString<256> workspace(at), benchFolder(at);
      llvm::sys::path::append(workspace, "WORKSPACE");
      llvm::sys::path::append(benchFolder, "bench");
      if (llvm::sys::fs::exists(workspace) &&
          llvm::sys::fs::is_directory(benchFolder))
        return at.str();
    }
  }
  return ".";
}

std::string benchmarkList() {
  std::string text = "  engine      pp/tg tokens per second of the CPU engine "
                     "(bench/engine/run.sh runs it beside llama.cpp)\n";
  for (const auto &[name, info] : bench::registeredBenchmarks())
    text += "  " + name +
            std::string(name.size() < 11 ? 12 - name.size() : 1, ' ') +
            info.summary + "\n";
  return text;
}

int runRegisteredBenchmark(const bench::BenchInfo &info,
                           const po::variables_map &values) {
  bench::BenchArgs args;
  args.name = info.name;
  std::optional<backend::Device> device = readDeviceOption("bench", values);
  if (!device)
    return 1;
  args.device = *device;
  std::optional<GemmChoices> gemmChoices = readGemmOptions("bench", values);
  if (!gemmChoices)
    return 1;
  args.gemmWeightCopy = gemmChoices->weightCopy;
  args.quantizedPrompt = gemmChoices->quantizedPrompt;
  args.repoRoot = findRepoRoot();
  args.modelPath = values.count("model") ? values["model"].as<std::string>()
                                         : defaultModelPath();
  if (values.count("results"))
    args.resultsDir = values["results"].as<std::string>();
  else {
    llvm::SmallString<256> results(args.repoRoot);
    llvm::sys::path::append(results, "bench", "results");
    args.resultsDir = results.str().str();
  }
  args.quick = values.count("quick") > 0;
  if (values.count("repetitions")) {
    args.repetitions = values["repetitions"].as<int>();
    if (args.repetitions < 1)
      return reportError("bench", "--repetitions must be at least 1");
  }
  if (values.count("threads"))
    args.threads = values["threads"].as<int>();
  args.seed = values["seed"].as<uint64_t>();
  if (values.count("set"))
    for (const std::string &text :
         values["set"].as<std::vector<std::string>>()) {
      auto [key, value] = llvm::StringRef(text).split('=');
      if (key.empty() || value.data() == nullptr ||
          !llvm::StringRef(text).contains('='))
        return reportError("bench",
                           "--set expects KEY=VALUE, got '" + text + "'");
      args.settings[key.str()] = value.str();
    }
  if (!llvm::sys::fs::exists(args.modelPath))
    return reportError("bench", "no model at '" + args.modelPath +
                                    "' (run tools/setup.sh, or pass --model)");
  if (llvm::Error error = info.run(args))
    return reportError("bench",
                       info.name + ": " + llvm::toString(std::move(error)));
  return 0;
}

} // namespace

int runBench(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                //
      ("name", po::value<std::string>(), "the benchmark (see --list)") //
      ("list", "list the benchmarks and their settings")               //
      ("model,m", po::value<std::string>(), "GGUF model")              //
      ("quick", "a small size for a smoke test (seconds)")             //
      ("repetitions,r", po::value<int>(),                              //
       "repetitions per point (default: the benchmark's own)")         //
      ("results", po::value<std::string>(),                            //
       "folder for NAME.md/.tsv/.png (default: bench/results)")        //
      ("seed", po::value<uint64_t>()->default_value(1),                //
       "seed of generated workloads")                                  //
      ("set", po::value<std::vector<std::string>>(),                   //
       "KEY=VALUE: a benchmark's own setting (see --list)")            //
      ("prompt-tokens", po::value<int>()->default_value(512),          //
       "engine: prompt length of the prefill test (ppN)")              //
      ("gen-tokens", po::value<int>()->default_value(128),             //
       "engine: decode steps of the generation test (tgN)")            //
      ("gen-depth", po::value<int>()->default_value(0),                //
       "engine: context tokens the generation test starts from, "
       "prefilled untimed (llama-bench's -d: tgN @ dD)")      //
      ("prefill-chunk", po::value<int>()->default_value(512), //
       "engine: prompt tokens per forward pass (0: the whole prompt; "
       "512 is llama-bench's micro-batch)")                    //
      ("f32", "engine: force f32 GEMMs")                       //
      ("gemm", po::value<std::string>()->default_value("amx"), //
       "engine: bf16 GEMM kernel: amx (spanc's AMX tiles; its AVX-512 "
       "BF16 kernel where the CPU has no AMX, oneDNN where it has neither), "
       "avx512bf16 (spanc's AVX-512 BF16 kernel) or onednn")             //
      ("numerics", po::value<std::string>()->default_value("default"),   //
       "engine: default, or llama (llama.cpp's arithmetic bit for bit)") //
      ("profile", "engine: time every op and print where time goes")     //
      ("json", "engine: print one JSON object instead of a table");
  addThreadsOption(options);
  addGemmOptions(options);
  addIsaOption(options);
  addDeviceOption(options);
  po::positional_options_description positional;
  positional.add("name", 1);
  std::string about =
      "Runs a benchmark. Each one writes bench/results/NAME.md (setup,\n"
      "machine, model, repetitions, median and spread), NAME.tsv (raw rows)\n"
      "and NAME.png; bench/run_all.sh runs them all. Speed figures are\n"
      "ratios taken side by side in one run. Benchmarks:\n" +
      benchmarkList() + "\n" + limitsHelp(ThreadsLimit);
  ParsedCommandLine parsed =
      parseCommandLine("bench", "spanc bench NAME [options]", about.c_str(),
                       options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;
  if (!applyIsaOption("bench", values))
    return 1;
  if (!applyThreadsOption("bench", values))
    return 1;
  if (values.count("list")) {
    llvm::outs() << benchmarkList();
    for (const auto &[name, info] : bench::registeredBenchmarks())
      if (!info.settingsHelp.empty())
        llvm::outs() << "\n"
                     << name << " settings (--set KEY=VALUE):\n"
                     << info.settingsHelp;
    return 0;
  }
  if (!values.count("name"))
    return reportError("bench", "which benchmark? (spanc bench --list)");
  std::string name = values["name"].as<std::string>();
  if (name == "engine")
    return runEngineBenchmark(values);
  const auto &benchmarks = bench::registeredBenchmarks();
  auto found = benchmarks.find(name);
  if (found == benchmarks.end())
    return reportError("bench", "unknown benchmark '" + name +
                                    "'; the benchmarks are:\n" +
                                    benchmarkList());
  return runRegisteredBenchmark(found->second, values);
}

} // namespace spanc::cli
