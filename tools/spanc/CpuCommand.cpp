//===- CpuCommand.cpp - spanc cpu -----------------------------------------===//
//
// Lists the kernel paths (instruction-set levels, CpuFeatures.h) and which
// of them this CPU runs: what --isa / SPANC_ISA can select here. `--paths`
// prints only the runnable levels, one line, for scripts and CI.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/CpuFeatures.h"
#include "tools/spanc/CommandLine.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::cli {

int runCpu(const std::vector<std::string> &args) {
  po::options_description options("Options");
  options.add_options()                                             //
      ("paths", "print only the paths this CPU runs, lowest first") //
      ("missing", "print only the paths it lacks, lowest first");
  po::positional_options_description positional;
  ParsedCommandLine parsed = parseCommandLine(
      "cpu", "spanc cpu [--paths | --missing]",
      "Lists the kernel paths (--isa levels) and which this CPU runs.", options,
      positional, args);
  if (parsed.exitCode)
    return *parsed.exitCode;
  const po::variables_map &values = parsed.values;
  const cpu::IsaLevel host = cpu::hostIsaLevel();
  llvm::raw_ostream &out = llvm::outs();
  if (values.count("paths") || values.count("missing")) {
    const bool wantRunnable = values.count("paths");
    std::string line;
    for (cpu::IsaLevel level : cpu::allIsaLevels())
      if ((level <= host) == wantRunnable)
        line += std::string(line.empty() ? "" : " ") + cpu::isaLevelName(level);
    out << line << "\n";
    return 0;
  }
  out << "cpu: " << cpu::hostCpuFeatures().describe() << "\n"
      << "kernel paths (--isa LEVEL or SPANC_ISA=LEVEL; default: "
      << cpu::isaLevelName(host) << "):\n";
  for (cpu::IsaLevel level : cpu::allIsaLevels()) {
    out << "  " << llvm::left_justify(cpu::isaLevelName(level), 12);
    if (level <= host)
      out << "runs here" << (level == host ? " (default)" : "") << "\n";
    else
      out << "not on this CPU: lacks " << cpu::missingForIsaLevel(level)
          << "\n";
  }
  return 0;
}

} // namespace spanc::cli
