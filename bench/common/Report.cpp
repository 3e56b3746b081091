//===- Report.cpp - Statistics, machine facts and result files ------------===//

#include "bench/common/Report.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

namespace spanc::bench {

double quantile(llvm::ArrayRef<double> samples, double q) {
  if (samples.empty())
    return 0;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  double position = std::clamp(q, 0.0, 1.0) * double(sorted.size() - 1);
  size_t below = size_t(position);
  size_t above = std::min(below + 1, sorted.size() - 1);
  double fraction = position - double(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

Summary summarize(llvm::ArrayRef<double> samples) {
  Summary summary;
  summary.count = samples.size();
  if (samples.empty())
    return summary;
  double sum = 0;
  for (double sample : samples)
    sum += sample;
  summary.mean = sum / double(samples.size());
  double squares = 0;
  for (double sample : samples)
    squares += (sample - summary.mean) * (sample - summary.mean);
  summary.stdev =
      samples.size() > 1 ? std::sqrt(squares / double(samples.size() - 1)) : 0;
  summary.min = *std::min_element(samples.begin(), samples.end());
  summary.max = *std::max_element(samples.begin(), samples.end());
  summary.median = quantile(samples, 0.5);
  summary.p90 = quantile(samples, 0.9);
  summary.p99 = quantile(samples, 0.99);
  return summary;
}

std::string formatSpread(const Summary &summary, int decimals) {
  std::string text;
  llvm::raw_string_ostream out(text);
  out << llvm::format("%.*f [%.*f, %.*f]", decimals, summary.median, decimals,
                      summary.min, decimals, summary.max);
  return out.str();
}

std::string describeMachine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model;
  std::set<std::string> flags;
  unsigned cpus = 0;
  while (std::getline(cpuinfo, line)) {
    llvm::StringRef text(line);
    if (text.startswith("processor"))
      ++cpus;
    else if (text.startswith("model name") && model.empty())
      model = text.split(':').second.trim().str();
    else if (text.startswith("flags") && flags.empty()) {
      llvm::SmallVector<llvm::StringRef, 128> words;
      text.split(':').second.split(words, ' ', -1, false);
      for (llvm::StringRef word : words)
        flags.insert(word.str());
    }
  }
  std::string features;
  for (const char *flag : {"avx2", "avx512f", "avx512_vnni", "avx512_bf16",
                           "amx_bf16", "amx_int8"})
    if (flags.count(flag))
      features += std::string(features.empty() ? "" : " ") + flag;
  std::string text = model.empty() ? "unknown CPU" : model;
  text += ", " + std::to_string(cpus) + " CPUs";
  if (!features.empty())
    text += " (" + features + ")";
  return text;
}

double loadAverageNow() {
  std::ifstream file("/proc/loadavg");
  double load = 0;
  file >> load;
  return load;
}

LoadSampler::LoadSampler() {
  samples.push_back(loadAverageNow());
  thread = std::thread([this] {
    // Every 5 s, in 100 ms naps so the destructor never waits long.
    for (int tick = 1; !stop.load(); ++tick) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (tick % 50 == 0 && !stop.load())
        samples.push_back(loadAverageNow());
    }
  });
}

LoadSampler::~LoadSampler() { finish(); }

void LoadSampler::finish() {
  stop.store(true);
  if (thread.joinable())
    thread.join();
}

std::string LoadSampler::stopAndDescribe() {
  finish();
  std::vector<double> copy = samples;
  copy.push_back(loadAverageNow());
  Summary summary = summarize(copy);
  std::string text;
  llvm::raw_string_ostream out(text);
  out << llvm::format("load average %.1f [%.1f, %.1f] over %zu samples",
                      summary.median, summary.min, summary.max, copy.size());
  return out.str();
}

llvm::Error writeTextFile(llvm::StringRef path, llvm::StringRef text) {
  llvm::StringRef folder = llvm::sys::path::parent_path(path);
  if (!folder.empty())
    if (std::error_code error = llvm::sys::fs::create_directories(folder))
      return llvm::createStringError(error, "cannot create %s: %s",
                                     folder.str().c_str(),
                                     error.message().c_str());
  std::string temporary = (path + ".tmp").str();
  {
    std::error_code error;
    llvm::raw_fd_ostream out(temporary, error);
    if (error)
      return llvm::createStringError(error, "cannot write %s: %s",
                                     temporary.c_str(),
                                     error.message().c_str());
    out << text;
  }
  if (std::error_code error = llvm::sys::fs::rename(temporary, path))
    return llvm::createStringError(error, "cannot replace %s: %s",
                                   path.str().c_str(), error.message().c_str());
  return llvm::Error::success();
}

llvm::Error runPlotScript(llvm::StringRef script,
                          llvm::ArrayRef<std::string> args) {
  std::string python = "/usr/bin/python3";
  if (!llvm::sys::fs::can_execute(python)) {
    llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("python3");
    if (!found)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "no python3 to draw the plot");
    python = *found;
  }
  llvm::SmallString<128> errorPath;
  llvm::sys::fs::createTemporaryFile("spanc-plot", "err", errorPath);
  std::vector<llvm::StringRef> argv = {python, script};
  for (const std::string &arg : args)
    argv.push_back(arg);
  llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, llvm::None,
                                                 llvm::StringRef(errorPath)};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(python, argv, llvm::None, redirects, 0,
                                         0, &message);
  std::string stderrText;
  if (auto buffer = llvm::MemoryBuffer::getFile(errorPath))
    stderrText = (*buffer)->getBuffer().trim().str();
  llvm::sys::fs::remove(errorPath);
  if (status != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "plot script %s failed (%d): %s%s",
        script.str().c_str(), status, message.c_str(), stderrText.c_str());
  return llvm::Error::success();
}

std::string resultPath(const BenchArgs &args, llvm::StringRef extension) {
  llvm::SmallString<256> path(args.resultsDir);
  llvm::sys::path::append(path, args.name + extension);
  return path.str().str();
}

llvm::Error finishResults(const BenchArgs &args, std::string markdown) {
  llvm::SmallString<256> script(args.repoRoot);
  llvm::sys::path::append(script, "bench", args.name, "plot.py");
  if (llvm::Error error = runPlotScript(
          script, {resultPath(args, ".tsv"), resultPath(args, ".png")})) {
    std::string reason = llvm::toString(std::move(error));
    llvm::errs() << args.name << ": no plot: " << reason << "\n";
    markdown += "\n(No plot this run: " + reason + ")\n";
  }
  if (llvm::Error error = writeTextFile(resultPath(args, ".md"), markdown))
    return error;
  llvm::outs() << markdown;
  return llvm::Error::success();
}

std::string timestampNow() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", std::localtime(&now));
  return text;
}

} // namespace spanc::bench
