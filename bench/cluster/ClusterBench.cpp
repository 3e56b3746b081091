//===- ClusterBench.cpp - spanc bench cluster -----------------------------===//
//
// `spanc bench cluster` (issue 27, point 4): routers in front of 2-3 real
// `spanc serve -t 1` replicas — round-robin, span-aware and prefix-only
// (deploy/router/span_router.py), sglang-router's cache_aware and Dynamo's
// stock KV router where tools/setup.sh installed them — and the simulation
// of 16-256 replicas (bench/cluster/simulate.py). Replicas, routers and
// clients are driven from Python (bench/cluster/run.py, under the tools
// venv: pyzmq and msgpack for the router); this spawns it with the
// settings and this binary as the replicas' spanc, then writes cluster.md
// around its tables and draws cluster.png (bench/cluster/plot.py).
//
//===----------------------------------------------------------------------===//

#include "bench/common/Bench.h"
#include "bench/common/Report.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

namespace spanc::bench {

namespace {

llvm::Error failure(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::string join(llvm::StringRef root, llvm::StringRef a, llvm::StringRef b,
                 llvm::StringRef c = "") {
  llvm::SmallString<256> path(root);
  llvm::sys::path::append(path, a, b, c);
  return path.str().str();
}

/// The arguments of bench/cluster/run.py: its defaults, the --quick sizes,
/// and what `--set` overrides.
llvm::Expected<std::vector<std::string>>
driverArguments(const BenchArgs &args) {
  struct Setting {
    const char *key, *full, *quick;
  } settings[] = {
      {"routers", "round-robin,span,prefix,sglang,dynamo", "round-robin,span"},
      {"replicas", "2", "2"},
      {"requests", "40", "8"},
      {"warmup", "8", "2"},
      {"clients", "2", "2"},
      {"k", "3", "3"},
      {"kv-cache", "768", "768"},
      {"sim-replicas", "2,3,16,64,256", "2,16"},
      {"sim-seeds", "3", "1"},
      {"sim-requests", "30", "10"},
  };
  std::vector<std::string> out;
  for (const Setting &setting : settings) {
    std::string value =
        args.setting(setting.key, args.quick ? setting.quick : setting.full);
    if (value.empty())
      return failure(llvm::Twine("--set ") + setting.key + ": empty");
    out.push_back(std::string("--") + setting.key);
    out.push_back(value);
  }
  for (const auto &entry : args.settings) {
    const std::string &key = entry.first;
    if (!llvm::any_of(settings, [&](const Setting &setting) {
          return key == setting.key;
        }))
      return failure("unknown --set " + key + " (see spanc bench --help)");
  }
  out.push_back("--repeats");
  out.push_back(std::to_string(args.repetitionsOr(3, 1)));
  out.push_back("--seed");
  out.push_back(std::to_string(args.seed));
  return out;
}

/// Runs the driver; its progress goes to this process's stdout and
/// stderr.
llvm::Error runDriver(const std::string &python,
                      const std::vector<std::string> &arguments) {
  std::vector<llvm::StringRef> argv = {python};
  for (const std::string &argument : arguments)
    argv.push_back(argument);
  std::string message;
  int status =
      llvm::sys::ExecuteAndWait(python, argv, llvm::None, {}, 0, 0, &message);
  if (status != 0)
    return failure("bench/cluster/run.py failed (exit status " +
                   llvm::Twine(status) + ")" +
                   (message.empty() ? "" : ": " + message) +
                   "; its output above says why");
  return llvm::Error::success();
}

llvm::Error runCluster(const BenchArgs &args) {
  const std::string python = join(args.repoRoot, ".venv", "bin", "python3");
  if (!llvm::sys::fs::can_execute(python))
    return failure("no tools venv at " + python +
                   " (the replicas' router needs its pyzmq and msgpack): "
                   "run tools/setup.sh");
  const std::string script = join(args.repoRoot, "bench", "cluster", "run.py");
  if (!llvm::sys::fs::exists(script))
    return failure("no " + script + " (is the repository root " +
                   args.repoRoot + "? set SPANC_ROOT)");
  if (!llvm::sys::fs::exists(args.modelPath))
    return failure("no model at " + args.modelPath +
                   ": run tools/setup.sh or pass --model");
  const std::string spanc =
      llvm::sys::fs::getMainExecutable("spanc", (void *)&runCluster);
  if (std::error_code error =
          llvm::sys::fs::create_directories(args.resultsDir))
    return failure("cannot create " + args.resultsDir + ": " + error.message());
  llvm::Expected<std::vector<std::string>> settings = driverArguments(args);
  if (!settings)
    return settings.takeError();

  llvm::SmallString<128> fragment;
  if (std::error_code error =
          llvm::sys::fs::createTemporaryFile("spanc-cluster", "md", fragment))
    return failure("cannot create a temporary file: " + error.message());
  std::vector<std::string> arguments = {script,
                                        "--spanc",
                                        spanc,
                                        "--model",
                                        args.modelPath,
                                        "--root",
                                        args.repoRoot,
                                        "--tsv",
                                        resultPath(args, ".tsv"),
                                        "--markdown",
                                        fragment.str().str()};
  arguments.insert(arguments.end(), settings->begin(), settings->end());

  LoadSampler load;
  auto started = std::chrono::steady_clock::now();
  llvm::Error error = runDriver(python, arguments);
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::string loadLine = load.stopAndDescribe();
  if (error) {
    llvm::sys::fs::remove(fragment);
    return error;
  }
  auto tables = llvm::MemoryBuffer::getFile(fragment);
  llvm::sys::fs::remove(fragment);
  if (!tables)
    return failure("bench/cluster/run.py wrote no tables: " +
                   tables.getError().message());

  std::string md;
  llvm::raw_string_ostream out(md);
  out << "# Routing spanc replicas: span-aware, round-robin, prefix, "
         "sglang-router and Dynamo (issue 27)\n\n"
      << "Generated by `spanc bench cluster" << (args.quick ? " --quick" : "");
  for (const auto &[key, value] : args.settings)
    out << " --set " << key << "=" << value;
  out << "` (bench/cluster/run.py, driven by bench/cluster/ClusterBench.cpp) "
         "on "
      << timestampNow() << " in " << llvm::format("%.0f", elapsed) << " s.\n\n"
      << (*tables)->getBuffer() << "\n## Setup\n\n"
      << "- Model: `" << llvm::sys::path::filename(args.modelPath)
      << "`, greedy, one thread per replica.\n"
      << "- Machine: " << describeMachine() << ".\n"
      << "- Load: " << loadLine
      << " (replicas, routers and clients share these cores; compare "
         "routers within a repeat).\n\n"
      << "Raw rows: [" << args.name << ".tsv](" << args.name
      << ".tsv); plot: " << args.name << ".png (bench/cluster/plot.py).\n";
  out.flush();
  return finishResults(args, std::move(md));
}

BenchRegistration registration{
    {"cluster",
     "routers in front of 2-3 spanc serve -t 1 replicas on a shared-document "
     "RAG with shuffled orders (span-aware, round-robin, prefix-only, "
     "sglang-router cache_aware, Dynamo's KV router): TTFT p50/p99 and "
     "cached share; plus the simulation of 16-256 replicas",
     "  routers=round-robin,span,prefix,sglang,dynamo: measured routers "
     "(--quick: round-robin,span); sglang and dynamo are skipped, with a "
     "note, where tools/setup.sh --with-sglang-router / --with-dynamo did "
     "not run\n"
     "  replicas=2: real replicas per router\n"
     "  requests=40: requests per router and repeat (--quick: 8)\n"
     "  warmup=8: of them, not measured (--quick: 2)\n"
     "  clients=2: concurrent clients\n"
     "  k=3: documents per request, of 12\n"
     "  kv-cache=768: KV cache tokens per replica (48 blocks: most of the "
     "corpus; less splits it)\n"
     "  sim-replicas=2,3,16,64,256: simulated replica counts (--quick: 2,16)\n"
     "  sim-seeds=3: simulated seeds per point (--quick: 1)\n"
     "  sim-requests=30: simulated requests per replica (--quick: 10)\n"
     "  (--repetitions: interleaved repeats, default 3, --quick 1)\n",
     runCluster}};

} // namespace

} // namespace spanc::bench
