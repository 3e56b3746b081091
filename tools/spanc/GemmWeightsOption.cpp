//===- GemmWeightsOption.cpp - --gemm-weights: borrowed 4-bit or a copy ---===//

#include "tools/spanc/GemmWeightsOption.h"

#include "tools/spanc/CommandLine.h"

namespace po = boost::program_options;

namespace spanc::cli {

void addGemmWeightsOption(po::options_description &options) {
  options.add_options()(
      "gemm-weights", po::value<std::string>()->default_value("borrowed"),
      "what spanc's bf16 prompt GEMMs (AMX or AVX-512 BF16) of a Q4_1/Q8_0 "
      "model read: borrowed (the "
      "4/8-bit weights decode reads, unpacked per call) or copy (a bf16 copy "
      "of each projection: 2 bytes a weight more memory, about the same "
      "prefill speed; same answers)");
}

std::optional<bool> readGemmWeightsOption(const char *command,
                                          const po::variables_map &values) {
  const std::string value = values["gemm-weights"].as<std::string>();
  if (value == "borrowed" || value == "copy")
    return value == "copy";
  reportError(command,
              "--gemm-weights must be borrowed or copy, not '" + value + "'");
  return std::nullopt;
}

} // namespace spanc::cli
