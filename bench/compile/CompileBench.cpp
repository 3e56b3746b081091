//===- CompileBench.cpp - Compile time of generated programs by size ------===//
//
// Generates bulks of judge/generator queries of about 10, 1 000 and 100 000
// IR ops, and times what `spanc compile --emit=ir-opt` does with them:
// parse + lower + verify (the frontend), then the default pipeline (which
// verifies once at the end; the profile also times `--verify-each`). Each size
// runs in a child process so that its peak RSS is its own. Writes
// OUT/compile.md and OUT/compile.tsv (for plot.py, which draws
// OUT/compile.png).
//
//   bazel run -c opt //bench/compile:compile_bench -- --out=bench/results
//
//===----------------------------------------------------------------------===//

#include "frontend/Lowering.h"
#include "frontend/SyntaxTree.h"
#include "ir/Diagnostics.h"
#include "ir/Verifier.h"
#include "passes/PassManager.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using namespace spanc;
using Clock = std::chrono::steady_clock;

/// One judge/generator query: shared and own fragments, sampled candidates
/// (a repeat), duplicated greedy chats (cse), a reduce (tree-reduce), and
/// an outer gen consuming inner gens under a + (plus-distribute).
void appendQuery(std::string &source, unsigned index, unsigned width) {
  std::string id = std::to_string(index);
  source += "query q" + id + " {\n";
  source += "  gen(max_tokens = 32, temperature = 0, reduce = 4) {\n";
  source += "    system rules\n    plus {\n";
  for (unsigned i = 0; i < width; ++i) {
    std::string part = std::to_string(i);
    switch (i % 4) {
    case 0:
      source += "      fragment \"shared fragment " +
                std::to_string((index + i) % 13) + "\"\n";
      break;
    case 1:
      source += "      repeat(3) { gen(temperature = 0.7) { system \"Write "
                "one candidate.\" user \"topic " +
                id + "." + part + "\" } }\n";
      break;
    case 2:
      source += "      chat(max_tokens = 8, temperature = 0) { user "
                "\"summarize " +
                std::to_string(index % 5) + "\" }\n";
      break;
    case 3:
      source += "      gen(max_tokens = 16, temperature = 0) { user "
                "\"fact " +
                id + "." + part + "\" }\n";
      break;
    }
  }
  source += "    }\n    user \"Which one is best for " + id + "?\"\n";
  source += "  }\n}\n";
}

std::string generateProgram(unsigned queries, unsigned width) {
  std::string source = "let rules = \"Judge the candidates. Answer with "
                       "a number.\"\n";
  for (unsigned q = 0; q < queries; ++q)
    appendQuery(source, q, width);
  return source;
}

double cpuMilliseconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

struct Compiled {
  std::unique_ptr<ir::Module> module;
  // CPU time of this thread (the machine is shared: wall time also counts
  // waiting for a core), and the wall time of both phases.
  double frontendMs = 0;
  double pipelineMs = 0;
  double wallMs = 0;
  size_t opsBefore = 0;
  size_t opsAfter = 0;
};

/// parse + lower + verify, then the default pipeline.
Compiled compile(const std::string &source) {
  Compiled result;
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  auto start = Clock::now();
  double cpuStart = cpuMilliseconds();
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(source, "bench.span"), llvm::SMLoc());
  diagnostics.registerBuffer("bench.span", bufferId);
  auto tree = frontend::SyntaxTree::parse(sourceMgr, bufferId);
  if (tree->numSyntaxErrors())
    std::abort();
  result.module = frontend::lowerToIR(*tree, diagnostics, {});
  if (!result.module || !ir::verify(*result.module, diagnostics))
    std::abort();
  double cpuLowered = cpuMilliseconds();
  result.opsBefore = result.module->countOps();

  passes::PassOptions options;
  passes::PassContext context(diagnostics, options);
  passes::PassManager manager(context);
  manager.addDefaultPipeline();
  manager.setVerifyEach(false);
  if (llvm::Error error = manager.run(*result.module)) {
    llvm::errs() << llvm::toString(std::move(error)) << "\n";
    std::abort();
  }
  double cpuOptimized = cpuMilliseconds();
  auto optimized = Clock::now();
  result.opsAfter = result.module->countOps();
  result.frontendMs = cpuLowered - cpuStart;
  result.pipelineMs = cpuOptimized - cpuLowered;
  result.wallMs =
      std::chrono::duration<double, std::milli>(optimized - start).count();
  return result;
}

/// One compile of `source`, phase by phase and pass by pass (CPU ms), as
/// a markdown table; each pass is followed by a verify, as the pass
/// manager does with --verify-each, timed apart.
std::string profile(const std::string &source) {
  std::string table;
  llvm::raw_string_ostream os(table);
  os << "| phase | CPU ms | IR ops after |\n|---|---:|---:|\n";
  llvm::SourceMgr sourceMgr;
  ir::DiagnosticEngine diagnostics(sourceMgr);
  double start = cpuMilliseconds();
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(source, "bench.span"), llvm::SMLoc());
  diagnostics.registerBuffer("bench.span", bufferId);
  auto tree = frontend::SyntaxTree::parse(sourceMgr, bufferId);
  double parsed = cpuMilliseconds();
  auto module = frontend::lowerToIR(*tree, diagnostics, {});
  double lowered = cpuMilliseconds();
  ir::verify(*module, diagnostics);
  double verified = cpuMilliseconds();
  size_t ops = module->countOps();
  os << llvm::format("| parse (frontend) | %.1f | |\n", parsed - start)
     << llvm::format("| lower (frontend) | %.1f | %zu |\n", lowered - parsed,
                     ops)
     << llvm::format("| verify | %.1f | |\n", verified - lowered);
  passes::PassOptions options;
  passes::PassContext context(diagnostics, options);
  double verifyTotal = 0;
  for (const char *name : passes::defaultPipeline()) {
    const passes::PassInfo *info = passes::lookupPass(name);
    if (!info)
      continue;
    auto pass = info->factory();
    double before = cpuMilliseconds();
    pass->run(*module, context);
    double after = cpuMilliseconds();
    ir::verify(*module, diagnostics);
    verifyTotal += cpuMilliseconds() - after;
    os << llvm::format("| pass %s | %.1f | %zu |\n", name, after - before,
                       module->countOps());
  }
  os << llvm::format("| verify after each pass (sum; `--verify-each`, else "
                     "only the last one runs) | %.1f | |\n",
                     verifyTotal);
  double before = cpuMilliseconds();
  tree.reset();
  module.reset();
  os << llvm::format("| free the parse tree and the module (not timed "
                     "above) | %.1f | |\n",
                     cpuMilliseconds() - before);
  os.flush();
  return table;
}

/// The number of queries (of `width` summands) whose program lowers to
/// about `targetOps` ops.
std::pair<unsigned, unsigned> shapeFor(unsigned targetOps) {
  unsigned width = targetOps < 40 ? 2 : 8;
  size_t perQuery = compile(generateProgram(1, width)).opsBefore;
  unsigned queries =
      std::max<unsigned>(1, (targetOps + perQuery / 2) / perQuery);
  return {queries, width};
}

struct Stats {
  double median, low, high; // median and the 10th/90th percentiles
};

Stats summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    return values[static_cast<size_t>(q * (values.size() - 1) + 0.5)];
  };
  return {at(0.5), at(0.1), at(0.9)};
}

struct Row {
  unsigned target;
  unsigned queries;
  size_t sourceBytes, opsBefore, opsAfter;
  unsigned repetitions;
  Stats frontend, pipeline, total, wall;
  long peakRssKb;
};

/// Runs one size (in the child process) and writes its row to `fd`.
void measure(unsigned target, int fd) {
  auto [queries, width] = shapeFor(target);
  std::string source = generateProgram(queries, width);
  unsigned repetitions = target <= 1000 ? 200 : 15;
  std::vector<double> frontend, pipeline, total, wall;
  Compiled last;
  for (unsigned rep = 0; rep < repetitions + 1; ++rep) {
    Compiled compiled = compile(source);
    if (rep == 0)
      continue; // Warm-up: page faults, first allocations.
    frontend.push_back(compiled.frontendMs);
    pipeline.push_back(compiled.pipelineMs);
    total.push_back(compiled.frontendMs + compiled.pipelineMs);
    wall.push_back(compiled.wallMs);
    last = std::move(compiled);
  }
  Stats f = summarize(frontend), p = summarize(pipeline), t = summarize(total),
        w = summarize(wall);
  std::string line;
  llvm::raw_string_ostream os(line);
  os << target << ' ' << queries << ' ' << source.size() << ' '
     << last.opsBefore << ' ' << last.opsAfter << ' ' << repetitions;
  for (const Stats &s : {f, p, t, w})
    os << llvm::format(" %.6f %.6f %.6f", s.median, s.low, s.high);
  os << '\n';
  os.flush();
  if (write(fd, line.data(), line.size()) != ssize_t(line.size()))
    std::exit(1);
}

Row runChild(unsigned target) {
  int fds[2];
  if (pipe(fds) != 0)
    std::exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    measure(target, fds[1]);
    std::_Exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[512];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0)
    text.append(buffer, n);
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    llvm::errs() << "size " << target << " failed\n";
    std::exit(1);
  }
  Row row{};
  std::sscanf(text.c_str(),
              "%u %u %zu %zu %zu %u %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf "
              "%lf %lf",
              &row.target, &row.queries, &row.sourceBytes, &row.opsBefore,
              &row.opsAfter, &row.repetitions, &row.frontend.median,
              &row.frontend.low, &row.frontend.high, &row.pipeline.median,
              &row.pipeline.low, &row.pipeline.high, &row.total.median,
              &row.total.low, &row.total.high, &row.wall.median, &row.wall.low,
              &row.wall.high);
  row.peakRssKb = usage.ru_maxrss;
  return row;
}

std::string machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model;
  unsigned cpus = 0;
  while (std::getline(cpuinfo, line)) {
    if (llvm::StringRef(line).startswith("model name") && model.empty())
      model = llvm::StringRef(line).split(':').second.trim().str();
    if (llvm::StringRef(line).startswith("processor"))
      ++cpus;
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  return model + ", " + std::to_string(cpus) + " CPUs, " +
         std::to_string((pages * pageSize) >> 30) + " GiB";
}

} // namespace

int main(int argc, char **argv) {
  std::string out = "bench/results";
  std::vector<unsigned> sizes = {10, 1000, 100000};
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg(argv[i]);
    if (arg.consume_front("--profile=")) {
      // Where the time goes for one size: CPU ms per phase and per pass.
      auto [queries, width] = shapeFor(std::stoul(arg.str()));
      llvm::outs() << profile(generateProgram(queries, width));
      return 0;
    }
    if (arg.consume_front("--write-program=")) {
      // For profiling by hand: --write-program=OPS:FILE.span
      auto [ops, path] = arg.split(':');
      auto [queries, width] = shapeFor(std::stoul(ops.str()));
      std::error_code ec;
      llvm::raw_fd_ostream file(path, ec);
      file << generateProgram(queries, width);
      return ec ? 1 : 0;
    }
    if (arg.consume_front("--out="))
      out = arg.str();
    else if (arg.consume_front("--sizes=")) {
      sizes.clear();
      llvm::SmallVector<llvm::StringRef, 4> parts;
      arg.split(parts, ',');
      for (llvm::StringRef part : parts)
        sizes.push_back(std::stoul(part.str()));
    } else {
      llvm::errs() << "usage: compile_bench [--out=DIR] [--sizes=a,b,c]\n";
      return 1;
    }
  }
  // `bazel run` starts in the runfiles; a relative --out means the
  // workspace.
  if (const char *workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY"))
    if (!llvm::sys::path::is_absolute(out))
      out = std::string(workspace) + "/" + out;
  llvm::sys::fs::create_directories(out);

  std::vector<Row> rows;
  for (unsigned size : sizes)
    rows.push_back(runChild(size));

  std::string table;
  llvm::raw_string_ostream md(table);
  md << "# Compile time by program size\n\n"
     << "Generated bulks of judge/generator queries (shared fragments, "
        "repeat(3) candidates, duplicated temperature-0 chats, reduce = 4), "
        "compiled as `spanc compile --emit=ir-opt` does: parse + lower + "
        "verify, then the default pipeline, verified once at the end "
        "(`--verify-each`, which verifies after every pass, costs what the "
        "profile's \"verify after each pass\" row says on top). "
        "Times are CPU time of the compiling thread (the machine is shared "
        "by several engineers, so wall time includes waiting for a core; it "
        "is given too): median over the repetitions, [10th–90th "
        "percentile]. Peak RSS of the process that compiled that size (one "
        "process per size, so it includes the repetitions' allocator "
        "high-water mark).\n\n"
     << "Machine: " << machine() << ". Build: `-c opt` (gcc 12, -O2).\n\n"
     << "| target nodes | queries | source | IR ops (before → after) | "
        "reps | frontend CPU ms | pipeline CPU ms | total CPU ms | total "
        "wall ms | peak RSS |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  auto cell = [&](const Stats &s) {
    md << llvm::format("%.3f [%.3f–%.3f]", s.median, s.low, s.high);
  };
  std::error_code ec;
  llvm::raw_fd_ostream tsv(out + "/compile.tsv", ec);
  tsv << "target\tops\ttotal_ms\ttotal_lo\ttotal_hi\tfrontend_ms\t"
         "pipeline_ms\tpeak_rss_mb\n";
  for (const Row &row : rows) {
    md << "| " << row.target << " | " << row.queries << " | "
       << llvm::format("%.1f KiB", row.sourceBytes / 1024.0) << " | "
       << row.opsBefore << " → " << row.opsAfter << " | " << row.repetitions
       << " | ";
    cell(row.frontend);
    md << " | ";
    cell(row.pipeline);
    md << " | ";
    cell(row.total);
    md << " | ";
    cell(row.wall);
    md << " | " << llvm::format("%.1f MiB", row.peakRssKb / 1024.0) << " |\n";
    tsv << row.target << '\t' << row.opsBefore << '\t' << row.total.median
        << '\t' << row.total.low << '\t' << row.total.high << '\t'
        << row.frontend.median << '\t' << row.pipeline.median << '\t'
        << llvm::format("%.1f", row.peakRssKb / 1024.0) << '\n';
  }
  if (!rows.empty()) {
    // Where the time goes at the largest size (this process, one run).
    auto [queries, width] = shapeFor(rows.back().target);
    md << "\n## Where the time goes: " << rows.back().target
       << " nodes, one compile\n\n"
       << profile(generateProgram(queries, width));
  }
  md << "\nReproduce: `bazel run -c opt //bench/compile:compile_bench -- "
        "--out=bench/results && /usr/bin/python3 bench/compile/plot.py` "
        "(`--profile=N` prints the breakdown alone).\n";
  md.flush();
  llvm::raw_fd_ostream file(out + "/compile.md", ec);
  file << table;
  llvm::outs() << table;
  return 0;
}
