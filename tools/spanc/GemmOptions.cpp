//===- GemmOptions.cpp - --gemm-weights and --prompt-int8 -----------------===//

#include "tools/spanc/GemmOptions.h"

#include "tools/spanc/CommandLine.h"

namespace po = boost::program_options;

namespace spanc::cli {

void addGemmOptions(po::options_description &options) {
  options.add_options()(
      "gemm-weights", po::value<std::string>()->default_value("borrowed"),
      "what spanc's bf16 prompt GEMMs (AMX or AVX-512 BF16) of a Q4_1/Q8_0 "
      "model read: borrowed (the "
      "4/8-bit weights decode reads, unpacked per call) or copy (a bf16 copy "
      "of each projection: 2 bytes a weight more memory, about the same "
      "prefill speed; same answers)")(
      "prompt-int8", po::value<std::string>()->default_value("auto"),
      "whether prompt rows multiply the 4/8-bit weights with int8 "
      "activations as decode rows do: auto (where the prompt GEMMs would be "
      "f32: AVX-512 without BF16 (VNNI, Q4_1/Q8_0) and AVX2 without AVX-512 "
      "(Q4_1); faster prefill, and no f32 copy of the weights) or off (the "
      "f32 GEMMs)");
}

std::optional<GemmChoices> readGemmOptions(const char *command,
                                           const po::variables_map &values) {
  GemmChoices choices;
  const std::string weights = values["gemm-weights"].as<std::string>();
  if (weights != "borrowed" && weights != "copy") {
    reportError(command, "--gemm-weights must be borrowed or copy, not '" +
                             weights + "'");
    return std::nullopt;
  }
  choices.weightCopy = weights == "copy";
  const std::string promptInt8 = values["prompt-int8"].as<std::string>();
  if (promptInt8 != "auto" && promptInt8 != "off") {
    reportError(command,
                "--prompt-int8 must be auto or off, not '" + promptInt8 + "'");
    return std::nullopt;
  }
  choices.quantizedPrompt = promptInt8 == "auto";
  return choices;
}

} // namespace spanc::cli
