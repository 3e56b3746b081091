//===- BenchCommand.cpp - spanc bench -------------------------------------===//
//
// `spanc bench engine`: pp/tg throughput of the CPU engine on a GGUF model
// (llama-bench's protocol), as a table or as JSON for bench/engine/run.sh.
// The other benchmarks belong to their issues.
//
//===----------------------------------------------------------------------===//

#include "tools/spanc/CommandLine.h"

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/model/EngineBench.h"

#include "llvm/Support/raw_ostream.h"

#include <omp.h>

namespace spanc::cli {

namespace {

void printProfile(llvm::raw_ostream &out, const char *title,
                  const model::ForwardProfile &profile) {
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
  if (!values.count("model"))
    return reportError("bench", "engine: --model FILE is required");
  model::EngineBenchOptions options;
  options.modelPath = values["model"].as<std::string>();
  options.promptTokens = values["prompt-tokens"].as<int>();
  options.generateTokens = values["gen-tokens"].as<int>();
  options.repetitions = values["repetitions"].as<int>();
  options.forceF32 = values.count("f32") > 0;
  std::optional<model::Numerics> numerics =
      model::parseNumerics(values["numerics"].as<std::string>());
  if (!numerics)
    return reportError("bench", "engine: --numerics must be default or llama");
  options.numerics = *numerics;
  options.profile = values.count("profile") > 0;
  if (values.count("quick")) {
    options.promptTokens = std::min(options.promptTokens, 64);
    options.generateTokens = std::min(options.generateTokens, 16);
    options.repetitions = 1;
  }
  if (options.promptTokens < 0 || options.generateTokens < 0 ||
      options.repetitions < 1)
    return reportError("bench", "engine: token counts must be >= 0 and "
                                "repetitions >= 1");
  if (values.count("threads")) {
    int threads = values["threads"].as<int>();
    if (threads < 1)
      return reportError("bench", "--threads must be at least 1");
    omp_set_num_threads(threads);
  }
  auto result = model::runEngineBench(options);
  if (!result)
    return reportError("bench", llvm::toString(result.takeError()));
  const int threads = omp_get_max_threads();
  llvm::raw_ostream &out = llvm::outs();
  double prefill = model::median(result->prefillTokensPerSecond);
  double decode = model::median(result->decodeTokensPerSecond);
  double prefillSpread =
      model::standardDeviation(result->prefillTokensPerSecond);
  double decodeSpread = model::standardDeviation(result->decodeTokensPerSecond);
  if (values.count("json")) {
    auto list = [](const std::vector<double> &samples) {
      std::string text = "[";
      for (size_t index = 0; index < samples.size(); ++index)
        text += (index ? ", " : "") + std::to_string(samples[index]);
      return text + "]";
    };
    out << "{\"engine\": \"spanc\", \"threads\": " << threads
        << ", \"precision\": \"" << result->precision << "\", \"cpu\": \""
        << cpu::cpuFeatures().describe()
        << "\", \"pp_tokens\": " << options.promptTokens
        << ", \"tg_tokens\": " << options.generateTokens
        << ", \"pp_samples\": " << list(result->prefillTokensPerSecond)
        << ", \"tg_samples\": " << list(result->decodeTokensPerSecond)
        << ", \"peak_rss_bytes\": " << result->peakRssBytes
        << ", \"load_seconds\": " << result->loadSeconds << "}\n";
    return 0;
  }
  out << "spanc engine: " << options.modelPath << ", " << threads
      << " threads, " << result->precision << " GEMMs ("
      << cpu::cpuFeatures().describe() << "), load "
      << llvm::format("%.2f", result->loadSeconds) << " s\n";
  out << "| test | tokens/s (median) | stddev | reps |\n|---|---|---|---|\n";
  if (options.promptTokens > 0)
    out << llvm::format("| pp%d | %.1f | %.1f | %zu |\n", options.promptTokens,
                        prefill, prefillSpread,
                        result->prefillTokensPerSecond.size());
  if (options.generateTokens > 0)
    out << llvm::format("| tg%d | %.1f | %.1f | %zu |\n",
                        options.generateTokens, decode, decodeSpread,
                        result->decodeTokensPerSecond.size());
  out << llvm::format("peak RSS %.1f MiB\n",
                      double(result->peakRssBytes) / (1 << 20));
  printProfile(out, "prefill", result->prefillProfile);
  printProfile(out, "decode", result->decodeProfile);
  return 0;
}

} // namespace

int runBench(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                                   //
      ("name", po::value<std::string>()->required(),                      //
       "benchmark: engine, kv, rag, nested, bulk, needle, accuracy")      //
      ("model,m", po::value<std::string>(), "GGUF model")                 //
      ("threads,t", po::value<int>(), "CPU threads (default: all cores)") //
      ("quick", "a small size for a smoke test")                          //
      ("prompt-tokens", po::value<int>()->default_value(512),             //
       "engine: prompt length of the prefill test (ppN)")                 //
      ("gen-tokens", po::value<int>()->default_value(128),                //
       "engine: decode steps of the generation test (tgN)")               //
      ("repetitions,r", po::value<int>()->default_value(5),               //
       "engine: measured repetitions (after one warm-up)")                //
      ("f32", "engine: force f32 GEMMs")                                  //
      ("numerics", po::value<std::string>()->default_value("default"),    //
       "engine: default, or llama (llama.cpp's arithmetic bit for bit)")  //
      ("profile", "engine: time every op and print where time goes")      //
      ("json", "engine: print one JSON object instead of a table");
  po::positional_options_description positional;
  positional.add("name", 1);
  ParsedCommandLine parsed = parseCommandLine(
      "bench", "spanc bench NAME [options]",
      "Runs a built-in benchmark and prints its table (NAME: engine).\n"
      "The KV cache, RAG and bulk benchmarks are scripts that write tables\n"
      "and plots under bench/results/: bench/kv/run_relocation_bench.sh,\n"
      "bench/rag/run.sh, bench/bulk/run.sh; bench/engine/run.sh runs this\n"
      "one beside llama.cpp.",
      options, positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  std::string name = parsed.values["name"].as<std::string>();
  if (name == "engine")
    return runEngineBenchmark(parsed.values);
  return notYetImplemented(
      ("bench " + name).c_str(),
      "#7 (the paper's benchmarks; see --help for the scripts there are)");
}

} // namespace spanc::cli
