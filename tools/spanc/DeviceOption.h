//===- DeviceOption.h - --device=cpu|cuda for the commands that run a model //
//
// `run`, `generate`, `bench` and `serve` run the forward pass on the CPU
// backend by default or, with --device=cuda, on the CUDA backend
// (runtime/backend/CudaBackend.h); the flag's help and its parsing are
// written once here. A GPU that cannot be used is reported when the
// backend is made (backend::probeCudaDevice's message), not here.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_DEVICEOPTION_H
#define SPANC_TOOLS_SPANC_DEVICEOPTION_H

#include "runtime/backend/Device.h"

#include <boost/program_options.hpp>

#include <optional>

namespace spanc::cli {

/// Adds --device (default cpu).
void addDeviceOption(boost::program_options::options_description &options);

/// The device asked for; nullopt after reporting anything but cpu or cuda
/// as "spanc COMMAND: error: ...".
std::optional<backend::Device>
readDeviceOption(const char *command,
                 const boost::program_options::variables_map &values);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_DEVICEOPTION_H
