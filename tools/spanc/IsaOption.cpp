//===- IsaOption.cpp - --isa: cap the instruction set the kernels use -----===//

#include "tools/spanc/IsaOption.h"

#include "tools/spanc/CommandLine.h"

#include "runtime/kernels/cpu/CpuFeatures.h"

#include <cstdlib>
#include <string>

namespace spanc::cli {

void addIsaOption(po::options_description &options) {
  static const std::string help =
      std::string("cap the instruction set of every kernel at one level: ") +
      cpu::isaLevelNames() +
      " (default: the CPU's best; SPANC_ISA sets it too; a level above the "
      "CPU's runs at the CPU's). This CPU: " +
      cpu::isaLevelName(cpu::hostIsaLevel()) + ". `spanc cpu` lists the paths";
  options.add_options()("isa", po::value<std::string>()->value_name("LEVEL"),
                        help.c_str());
}

bool applyIsaOption(const char *command, const po::variables_map &values) {
  std::string name, source;
  if (values.count("isa")) {
    name = values["isa"].as<std::string>();
    source = "--isa " + name;
  } else if (const char *environment = std::getenv("SPANC_ISA");
             environment && *environment) {
    name = environment;
    source = "SPANC_ISA=" + name;
  } else {
    return true;
  }
  std::optional<cpu::IsaLevel> level = cpu::parseIsaLevel(name);
  if (!level) {
    reportError(command, source + ": not a kernel path; expected one of " +
                             cpu::isaLevelNames());
    return false;
  }
  if (!cpu::setIsaCap(*level)) {
    reportError(command, source + ": the kernels already run at " +
                             cpu::isaLevelName(cpu::isaLevel()));
    return false;
  }
  return true;
}

} // namespace spanc::cli
