//===- RagProfile.cpp - Where a measured call's time went, by phase -------===//

#include "bench/rag/RagProfile.h"

#include "bench/common/ModelSession.h"
#include "bench/common/Report.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <set>
#include <vector>

namespace spanc::bench {

PhaseBreakdown breakdownOf(const sched::PhaseProfile &profile,
                           const model::ModelConfig &config,
                           double compileSeconds) {
  const backend::ForwardProfile &forward = profile.forward;
  PhaseBreakdown result;
  result.compileMs = 1e3 * compileSeconds;
  result.layoutMs = 1e3 * profile.layoutSeconds;
  result.lookupMs = 1e3 * profile.lookupSeconds;
  result.scheduleMs =
      1e3 * (profile.admissionSeconds + profile.relocationPlanSeconds +
             profile.batchSeconds + profile.prepareSeconds);
  result.relocateMs = 1e3 * (profile.relocateSeconds + profile.repairSeconds);
  result.attentionMs = 1e3 * forward.attentionSeconds;
  result.gemmMs = 1e3 * forward.gemmSeconds();
  result.otherMs =
      1e3 * (forward.otherLayerSeconds() + forward.embeddingSeconds);
  result.headMs = 1e3 * forward.outputHeadSeconds;
  // The ops of a repair's passes count in the ops above and in relocateMs.
  result.outsideMs =
      std::max(0.0, 1e3 * profile.forwardSeconds - result.attentionMs -
                        result.gemmMs - result.otherMs - result.headMs);
  result.sampleMs = 1e3 * (profile.sampleSeconds + profile.updateSeconds);
  result.stepsMs = 1e3 * profile.stepSeconds;
  auto gflops = [](double flops, double seconds) {
    return seconds > 0 ? flops / seconds * 1e-9 : 0.0;
  };
  const double attentionFlops = forward.attentionFlops(config);
  const double gemmFlops = forward.gemmFlops(config);
  result.attentionGflops = gflops(attentionFlops, forward.attentionSeconds);
  result.gemmGflops = gflops(gemmFlops, forward.gemmSeconds());
  result.layerGflop = 1e-9 * (attentionFlops + gemmFlops);
  result.steps = double(profile.steps);
  result.passes = double(forward.passes);
  result.sequences = double(profile.sequences);
  result.layers = double(forward.layers);
  return result;
}

std::string describeBreakdown(const PhaseBreakdown &b) {
  return printed("steps %.0f passes %.0f seqs %.0f | layout %.2f lookup %.2f "
                 "sched %.2f reloc %.2f | attn %.1f gemm %.1f other %.1f "
                 "head %.1f outside %.1f | sample %.2f ms",
                 b.steps, b.passes, b.sequences, b.layoutMs, b.lookupMs,
                 b.scheduleMs, b.relocateMs, b.attentionMs, b.gemmMs, b.otherMs,
                 b.headMs, b.outsideMs, b.sampleMs);
}

void writeBreakdownTable(
    llvm::raw_ostream &out, llvm::StringRef title,
    llvm::ArrayRef<std::pair<unsigned, std::pair<double, PhaseBreakdown>>>
        rows) {
  if (rows.empty())
    return;
  struct Column {
    const char *name;
    double PhaseBreakdown::*field;
    int decimals;
  };
  const Column columns[] = {
      {"compile + plan", &PhaseBreakdown::compileMs, 1},
      {"layout + hash", &PhaseBreakdown::layoutMs, 2},
      {"lookup + alloc", &PhaseBreakdown::lookupMs, 2},
      {"admission, CIDRA, batch", &PhaseBreakdown::scheduleMs, 2},
      {"relocation + repair", &PhaseBreakdown::relocateMs, 2},
      {"attention", &PhaseBreakdown::attentionMs, 1},
      {"GEMMs", &PhaseBreakdown::gemmMs, 1},
      {"attention GFLOP/s", &PhaseBreakdown::attentionGflops, 0},
      {"GEMM GFLOP/s", &PhaseBreakdown::gemmGflops, 0},
      {"other layer ops", &PhaseBreakdown::otherMs, 1},
      {"output head", &PhaseBreakdown::headMs, 1},
      {"forward outside ops", &PhaseBreakdown::outsideMs, 1},
      {"sampling + update", &PhaseBreakdown::sampleMs, 2},
      {"steps", &PhaseBreakdown::steps, 0},
      {"forward passes", &PhaseBreakdown::passes, 0},
      {"sequences", &PhaseBreakdown::sequences, 0}};
  out << "\n### " << title << "\n\n| docs | TTFT |";
  for (const Column &column : columns)
    out << " " << column.name << " |";
  out << "\n|---:|---:|";
  for (size_t i = 0; i < std::size(columns); ++i)
    out << "---:|";
  out << "\n";
  std::set<unsigned> counts;
  for (const auto &row : rows)
    counts.insert(row.first);
  for (unsigned docs : counts) {
    auto median = [&](auto value) {
      std::vector<double> values;
      for (const auto &row : rows)
        if (row.first == docs)
          values.push_back(value(row.second));
      return summarize(values).median;
    };
    out << "| " << docs << " | "
        << printed("%.1f",
                   median([](const auto &entry) { return entry.first; }))
        << " |";
    for (const Column &column : columns)
      out << " "
          << printed("%.*f", column.decimals, median([&](const auto &entry) {
                       return entry.second.*column.field;
                     }))
          << " |";
    out << "\n";
  }
}

} // namespace spanc::bench
