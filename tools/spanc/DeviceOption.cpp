//===- DeviceOption.cpp - --device=cpu|cuda -------------------------------===//

#include "tools/spanc/DeviceOption.h"

#include "tools/spanc/CommandLine.h"

namespace spanc::cli {

namespace po = boost::program_options;

void addDeviceOption(po::options_description &options) {
  options.add_options()                                                 //
      ("device", po::value<std::string>()->default_value("cpu"),        //
       "where the model runs: cpu, or cuda (one NVIDIA GPU of compute " //
       "capability 8.0 or newer; fails at start with the reason when "  //
       "none is usable; tested on an H200, see README)");
}

std::optional<backend::Device>
readDeviceOption(const char *command, const po::variables_map &values) {
  const std::string name = values["device"].as<std::string>();
  std::optional<backend::Device> device = backend::parseDevice(name);
  if (!device)
    reportError(command, "--device '" + name + "': expected cpu or cuda");
  return device;
}

} // namespace spanc::cli
