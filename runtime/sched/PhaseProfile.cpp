//===- PhaseProfile.cpp - Where a run's scheduler steps spent their time --===//

#include "runtime/sched/PhaseProfile.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace spanc::sched {

PhaseProfile &PhaseProfile::operator+=(const PhaseProfile &other) {
  steps += other.steps;
  sequences += other.sequences;
  layouts += other.layouts;
  admissions += other.admissions;
  layoutSeconds += other.layoutSeconds;
  lookupSeconds += other.lookupSeconds;
  admissionSeconds += other.admissionSeconds;
  relocationPlanSeconds += other.relocationPlanSeconds;
  batchSeconds += other.batchSeconds;
  relocateSeconds += other.relocateSeconds;
  repairSeconds += other.repairSeconds;
  prepareSeconds += other.prepareSeconds;
  forwardSeconds += other.forwardSeconds;
  sampleSeconds += other.sampleSeconds;
  updateSeconds += other.updateSeconds;
  stepSeconds += other.stepSeconds;
  forward += other.forward;
  return *this;
}

void printPhaseProfile(llvm::raw_ostream &os, const PhaseProfile &profile,
                       double compileSeconds,
                       const model::ModelConfig *config) {
  const backend::ForwardProfile &forward = profile.forward;
  const double total = profile.stepSeconds;
  os << llvm::format("phases: %llu steps, %lld forward passes (%lld layers, "
                     "%lld tokens, %llu sequences), %.2f ms in steps\n",
                     (unsigned long long)profile.steps,
                     (long long)forward.passes, (long long)forward.layers,
                     (long long)forward.tokens,
                     (unsigned long long)profile.sequences, 1e3 * total);
  auto line = [&](int indent, const char *name, double seconds,
                  const std::string &note = "") {
    const char *none = "";
    os << llvm::format("  %*s%-*s %9.2f ms %6.1f%%", indent, none, 26 - indent,
                       name, 1e3 * seconds,
                       total > 0 ? 100.0 * seconds / total : 0.0);
    if (!note.empty())
      os << "  " << note;
    os << "\n";
  };
  const double layers = double(std::max<int64_t>(forward.layers, 1));
  auto perLayer = [&](double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f ms/layer", 1e3 * seconds / layers);
    return std::string(text);
  };
  if (compileSeconds > 0)
    os << llvm::format("  %-26s %9.2f ms  (before the run)\n",
                       static_cast<const char *>("compile + plan"),
                       1e3 * compileSeconds);
  line(0, "layout (hash, pages)", profile.layoutSeconds,
       std::to_string(profile.layouts) + " layouts");
  line(0, "lookup + allocation", profile.lookupSeconds,
       std::to_string(profile.admissions) + " admissions");
  line(0, "admission (other)", profile.admissionSeconds);
  line(0, "relocation plan (CIDRA)", profile.relocationPlanSeconds);
  line(0, "batch (tokens, pages)", profile.batchSeconds);
  line(0, "relocations + copies", profile.relocateSeconds);
  line(0, "repairs", profile.repairSeconds);
  line(0, "forward sequences", profile.prepareSeconds);
  line(0, "forward pass", profile.forwardSeconds);
  if (forward.total() > 0) {
    line(2, "step layout", forward.layoutSeconds);
    line(2, "embedding", forward.embeddingSeconds);
    auto rate = [](double flops, double seconds) {
      if (seconds <= 0)
        return std::string();
      char text[32];
      std::snprintf(text, sizeof text, ", %.0f GFLOP/s",
                    flops / seconds * 1e-9);
      return std::string(text);
    };
    std::string attentionRate, gemmRate;
    if (config) {
      attentionRate =
          rate(forward.attentionFlops(*config), forward.attentionSeconds);
      gemmRate = rate(forward.gemmFlops(*config), forward.gemmSeconds());
    }
    char pairs[64];
    // The pairs attended: a pass's last layer skips its non-logit rows'.
    std::snprintf(pairs, sizeof pairs, ", %lld query-key pairs in all",
                  (long long)(forward.attentionPairs - forward.kvOnlyPairs));
    line(2, "attention", forward.attentionSeconds,
         perLayer(forward.attentionSeconds) + pairs + attentionRate);
    line(2, "GEMMs (qkv,out,ffn)", forward.gemmSeconds(),
         perLayer(forward.gemmSeconds()) + gemmRate);
    line(2, "other layer ops", forward.otherLayerSeconds(),
         perLayer(forward.otherLayerSeconds()));
    line(4, "norms", forward.normSeconds);
    line(4, "RoPE", forward.ropeSeconds);
    line(4, "K/V write", forward.kvWriteSeconds);
    line(4, "SwiGLU, residuals",
         forward.swiGluSeconds + forward.residualSeconds);
    line(2, "output head", forward.outputHeadSeconds);
    line(2, "outside the ops",
         std::max(0.0, profile.forwardSeconds - forward.layoutSeconds -
                           forward.total()));
  }
  line(0, "sampling", profile.sampleSeconds);
  line(0, "update", profile.updateSeconds);
  const double phases =
      profile.layoutSeconds + profile.lookupSeconds + profile.admissionSeconds +
      profile.relocationPlanSeconds + profile.batchSeconds +
      profile.relocateSeconds + profile.repairSeconds + profile.prepareSeconds +
      profile.forwardSeconds + profile.sampleSeconds + profile.updateSeconds;
  line(0, "the rest", std::max(0.0, total - phases));
}

} // namespace spanc::sched
